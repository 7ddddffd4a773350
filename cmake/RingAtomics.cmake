# skbuild-cudaq's ring atomics (included by the top-level CMakeLists.txt, after
# cmake/NativeCore.cmake): skbuild_cudaq/realtime/ring/_atomics.c, one C file against
# Python's limited API (3.10): the acquire loads and release stores through which the
# ring's Python paths touch its flags and its request-id source (correct on weakly
# ordered CPUs such as aarch64, not only on x86-TSO). Required, like the native core
# (the same C compiler and Python headers): the Python paths have no plain-access
# fallback.
include_guard(GLOBAL)
include("${CMAKE_CURRENT_LIST_DIR}/NativeCore.cmake")

_cudaq_python_module(_atomics skbuild_cudaq/realtime/ring "ring atomics"
                     "${PROJECT_SOURCE_DIR}/skbuild_cudaq/realtime/ring/_atomics.c")
