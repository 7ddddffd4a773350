# skbuild-cudaq's native core (included by the top-level CMakeLists.txt): the module
# skbuild_cudaq.realtime.host._native of the C files in skbuild_cudaq/realtime/host/native/
# (one job each, internal.h says which), against Python's limited API (3.10): the host
# path's serving loop (HostDispatcher) with its graph workers, the UDP feeder (UdpFeeder)
# and the lookup and direct call of native host handlers (cudaq/realtime/host_handler.h).
#
# Required: the host path and the UDP feeder have no second implementation in Python,
# so a build without a C compiler or without Python's headers fails here, naming what
# to install, instead of producing a package whose host path and test server cannot
# run. (A C compiler is a prerequisite of building skbuild-cudaq from source; wheels
# carry the module.) Linux is the platform served: recvmmsg/sendmmsg there, one
# datagram a call on other POSIX systems.
include_guard(GLOBAL)

# At file scope: enable_language() cannot be called from a function.
include(CheckLanguage)
check_language(C)
if(NOT CMAKE_C_COMPILER)
  message(FATAL_ERROR
    "skbuild-cudaq: no C compiler found: skbuild-cudaq's native host path (the serving "
    "loop and the UDP feeder, skbuild_cudaq/realtime/host/native/) needs one to build. "
    "Install one (e.g. gcc) or point CC at it.")
endif()
enable_language(C)
# scikit-build-core names the stable-ABI component when the wheel is abi3
# (wheel.py-api = "cp310"); a free-threaded CPython has no stable ABI.
find_package(Python 3.10 COMPONENTS Interpreter Development.Module ${SKBUILD_SABI_COMPONENT})
if(NOT Python_Development.Module_FOUND)
  message(FATAL_ERROR
    "skbuild-cudaq: Python's headers were not found for ${Python_EXECUTABLE}: skbuild-cudaq's "
    "native host path (skbuild_cudaq/realtime/host/native/) needs them to build. Install the "
    "python3-dev package (or its equivalent for this Python).")
endif()
find_package(Threads REQUIRED)

# _cudaq_python_module(<target> <destination> <what> <source>...): a Python extension module
# of the C files <source>..., against the limited API 3.10 where the wheel is abi3 (else the full API, with
# SKBUILD_CUDAQ_FULL_API=1), C11, hidden symbols, installed into <destination>; the status
# line names <what>. Used for the native core (below) and the compiled ring client
# (cmake/FastClient.cmake).
function(_cudaq_python_module target destination what)
  if(SKBUILD_SABI_COMPONENT AND Python_${SKBUILD_SABI_COMPONENT}_FOUND)
    python_add_library(${target} MODULE WITH_SOABI USE_SABI 3.10 ${ARGN})
    set(_abi "stable ABI 3.10")
  else()
    python_add_library(${target} MODULE WITH_SOABI ${ARGN})
    target_compile_definitions(${target} PRIVATE SKBUILD_CUDAQ_FULL_API=1)
    set(_abi "CPython ${Python_VERSION}")
  endif()
  set_target_properties(${target} PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                                             C_VISIBILITY_PRESET hidden)
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -O2 -Wall -Wextra)
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION "${destination}")
  message(STATUS "skbuild-cudaq: ${what}: ${CMAKE_C_COMPILER_ID} ${_abi}")
endfunction()

# _cudaq_native_core(<dir>): the module target _native of the C files in <dir> (listed here:
# a new transport is a file beside udp_feeder.c and a line below), installed into
# skbuild_cudaq/realtime/host.
function(_cudaq_native_core dir)
  set(_sources life.c ring.c handlers.c table.c loop.c graphs.c udp_feeder.c backlog.c segment.c
               module.c)
  list(TRANSFORM _sources PREPEND "${dir}/")
  _cudaq_python_module(_native skbuild_cudaq/realtime/host "native core" ${_sources})
  target_include_directories(_native PRIVATE "${PROJECT_SOURCE_DIR}/skbuild_cudaq/include")
  target_link_libraries(_native PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
endfunction()

_cudaq_native_core("${PROJECT_SOURCE_DIR}/skbuild_cudaq/realtime/host/native")
