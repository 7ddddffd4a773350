# skbuild-cudaq's compiled ring client (included by the top-level CMakeLists.txt):
# skbuild_cudaq/realtime/ring/_fastcall.c, one C file against Python's limited API
# (3.10), the round trip of RingClient.call in one call into C. The run time works
# without it (RingClient falls back to its pure-Python path, about 1 us slower per
# call), so by default it is built when it can be:
#
#   SKBUILD_CUDAQ_FAST_CLIENT=AUTO  (default) built when a C compiler and Python's
#                                   headers are found; otherwise a warning says why
#   SKBUILD_CUDAQ_FAST_CLIENT=ON    required: configuring fails if it cannot be built
#   SKBUILD_CUDAQ_FAST_CLIENT=OFF   left out (a pure-Python run time)
#
# e.g. pip install skbuild-cudaq -Ccmake.define.SKBUILD_CUDAQ_FAST_CLIENT=ON
include_guard(GLOBAL)

set(SKBUILD_CUDAQ_FAST_CLIENT AUTO CACHE STRING
    "Build the compiled ring client (AUTO: when a C compiler and Python's headers are found)")
set_property(CACHE SKBUILD_CUDAQ_FAST_CLIENT PROPERTY STRINGS AUTO ON OFF)

# _cudaq_fast_client_skip(<why>): a warning under AUTO, an error under ON.
function(_cudaq_fast_client_skip why)
  set(_how "set SKBUILD_CUDAQ_FAST_CLIENT=OFF to build without it, or install what is missing")
  if(SKBUILD_CUDAQ_FAST_CLIENT STREQUAL "ON")
    message(FATAL_ERROR "skbuild-cudaq: the compiled ring client cannot be built: ${why} "
                        "(${_how})")
  endif()
  message(WARNING "skbuild-cudaq: the compiled ring client is left out: ${why}; "
                  "RingClient.call takes its pure-Python path (about 1 us more per call). "
                  "To build it, install what is missing; to silence this, set "
                  "SKBUILD_CUDAQ_FAST_CLIENT=OFF.")
endfunction()

# At file scope: enable_language() cannot be called from a function.
string(TOUPPER "${SKBUILD_CUDAQ_FAST_CLIENT}" _cudaq_fc_mode)
if(NOT _cudaq_fc_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "skbuild-cudaq: SKBUILD_CUDAQ_FAST_CLIENT=${SKBUILD_CUDAQ_FAST_CLIENT}: "
                      "expected AUTO, ON or OFF")
endif()
if(_cudaq_fc_mode STREQUAL "OFF")
  message(STATUS "skbuild-cudaq: compiled ring client: off (SKBUILD_CUDAQ_FAST_CLIENT=OFF)")
  return()
endif()
include(CheckLanguage)
check_language(C)
if(NOT CMAKE_C_COMPILER)
  _cudaq_fast_client_skip("no C compiler found (set CC)")
  return()
endif()
enable_language(C)
# scikit-build-core names the stable-ABI component when the wheel is abi3
# (wheel.py-api = "cp310"); a free-threaded CPython has no stable ABI.
find_package(Python 3.10 COMPONENTS Interpreter Development.Module ${SKBUILD_SABI_COMPONENT})
if(NOT Python_Development.Module_FOUND)
  _cudaq_fast_client_skip("Python's headers were not found for ${Python_EXECUTABLE} "
                          "(the python3-dev package, or its equivalent)")
  return()
endif()

# _cudaq_fast_client(<source>): the module target _fastcall, installed next to client.py.
function(_cudaq_fast_client src)
  if(SKBUILD_SABI_COMPONENT AND Python_${SKBUILD_SABI_COMPONENT}_FOUND)
    python_add_library(_fastcall MODULE WITH_SOABI USE_SABI 3.10 "${src}")
    set(_abi "stable ABI 3.10")
  else()
    python_add_library(_fastcall MODULE WITH_SOABI "${src}")
    target_compile_definitions(_fastcall PRIVATE SKBUILD_CUDAQ_FULL_API=1)
    set(_abi "CPython ${Python_VERSION}")
  endif()
  set_target_properties(_fastcall PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                                             C_VISIBILITY_PRESET hidden)
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(_fastcall PRIVATE -O2 -Wall -Wextra)
  endif()
  install(TARGETS _fastcall LIBRARY DESTINATION skbuild_cudaq/realtime/ring)
  message(STATUS "skbuild-cudaq: compiled ring client: ${CMAKE_C_COMPILER_ID} ${_abi}")
endfunction()

_cudaq_fast_client("${PROJECT_SOURCE_DIR}/skbuild_cudaq/realtime/ring/_fastcall.c")
