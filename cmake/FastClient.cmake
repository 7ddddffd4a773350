# skbuild-cudaq's compiled ring client (included by the top-level CMakeLists.txt, after
# cmake/NativeCore.cmake): the module skbuild_cudaq.realtime.ring._fastcall of the C files
# in skbuild_cudaq/realtime/ring/fastcall/ (fastcall.h says which does what), against
# Python's limited API (3.10), the round trip of RingClient.call in one call into C. The
# run time works without it (RingClient falls back to its pure-Python path, about 1 us
# slower per call). What it needs, a C compiler and Python's headers, the native core
# requires already (a configure error without them), so it is always built unless:
#
#   SKBUILD_CUDAQ_FAST_CLIENT=OFF   left out (RingClient's pure-Python path only)
#
# AUTO (the default) and ON build it. e.g.
# pip install skbuild-cudaq -Ccmake.define.SKBUILD_CUDAQ_FAST_CLIENT=OFF
include_guard(GLOBAL)
include("${CMAKE_CURRENT_LIST_DIR}/NativeCore.cmake")

set(SKBUILD_CUDAQ_FAST_CLIENT AUTO CACHE STRING
    "Build the compiled ring client (AUTO or ON: built; OFF: left out)")
set_property(CACHE SKBUILD_CUDAQ_FAST_CLIENT PROPERTY STRINGS AUTO ON OFF)

string(TOUPPER "${SKBUILD_CUDAQ_FAST_CLIENT}" _cudaq_fc_mode)
if(NOT _cudaq_fc_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "skbuild-cudaq: SKBUILD_CUDAQ_FAST_CLIENT=${SKBUILD_CUDAQ_FAST_CLIENT}: "
                      "expected AUTO, ON or OFF")
endif()
if(_cudaq_fc_mode STREQUAL "OFF")
  message(STATUS "skbuild-cudaq: compiled ring client: off (SKBUILD_CUDAQ_FAST_CLIENT=OFF)")
else()
  set(_cudaq_fc_sources round_trip.c ring.c client.c module.c)
  list(TRANSFORM _cudaq_fc_sources PREPEND "${PROJECT_SOURCE_DIR}/skbuild_cudaq/realtime/ring/fastcall/")
  _cudaq_python_module(_fastcall skbuild_cudaq/realtime/ring "compiled ring client" ${_cudaq_fc_sources})
endif()
