# SPDX-License-Identifier: Apache-2.0
#[=======================================================================[.rst:
skbuild_cudaq_auto.cmake
------------------------

Included by the ``skbuild_cudaq.build`` backend through ``CMAKE_PROJECT_INCLUDE``
(after the project's first ``project()`` call): it adds every kernel declared in
``[tool.cudaq.dispatch-kernels]`` to its target *after* the project's
``CMakeLists.txt`` ran, with no edits to it. The backend passes the table as
index-based variables with absolute paths:

``SKBUILD_CUDAQ_KERNEL_COUNT``
  Number of entries.
``SKBUILD_CUDAQ_KERNEL_<i>_TARGET``, ``..._SOURCES``, ``..._ARCHITECTURES``
  Entry ``<i>`` (0-based): target name, ``;``-list of sources and architectures.
``SKBUILD_CUDAQ_USER_PROJECT_INCLUDE``
  A ``CMAKE_PROJECT_INCLUDE`` the user set themselves: included as well.
#]=======================================================================]

if(SKBUILD_CUDAQ_USER_PROJECT_INCLUDE)
  include("${SKBUILD_CUDAQ_USER_PROJECT_INCLUDE}")
endif()

include_guard(GLOBAL)
include("${CMAKE_CURRENT_LIST_DIR}/skbuild_cudaqConfig.cmake")
# The backend also passes skbuild_cudaq_DIR, for a project's own
# find_package(skbuild_cudaq). A project that only uses [tool.cudaq] never calls
# it; reading the variable here keeps CMake from warning that it was "not used
# by the project".
set(_SKBUILD_CUDAQ_PASSED_DIR "${skbuild_cudaq_DIR}")
unset(_SKBUILD_CUDAQ_PASSED_DIR)

cmake_policy(PUSH)
cmake_policy(VERSION 3.25...4.0)

#[=[
_cudaq_realtime_auto_add_kernels()

Deferred to the end of the top-level directory: one
cudaq_realtime_add_dispatch_kernel per [tool.cudaq.dispatch-kernels] entry,
with messages naming the pyproject key.
#]=]
function(_cudaq_realtime_auto_add_kernels)
  if(NOT SKBUILD_CUDAQ_KERNEL_COUNT)
    return()
  endif()
  math(EXPR _last "${SKBUILD_CUDAQ_KERNEL_COUNT} - 1")
  foreach(_i RANGE ${_last})
    set(_target "${SKBUILD_CUDAQ_KERNEL_${_i}_TARGET}")
    set(_CUDAQ_REALTIME_KEY "tool.cudaq.dispatch-kernels.${_target}")
    if(NOT TARGET "${_target}")
      _cudaq_realtime_did_you_mean("${_target}" _hint)
      message(FATAL_ERROR
        "skbuild-cudaq: ${_CUDAQ_REALTIME_KEY}: the CMake project never creates a target named "
        "\"${_target}\". Name an existing target (the extension's CMake target, e.g. the first "
        "argument of python_add_library or nanobind_add_module) in [tool.cudaq.dispatch-kernels] "
        "of pyproject.toml.${_hint}")
    endif()
    set(_archs)
    if(SKBUILD_CUDAQ_KERNEL_${_i}_ARCHITECTURES)
      set(_archs ARCHITECTURES ${SKBUILD_CUDAQ_KERNEL_${_i}_ARCHITECTURES})
    endif()
    cudaq_realtime_add_dispatch_kernel("${_target}" ${SKBUILD_CUDAQ_KERNEL_${_i}_SOURCES} ${_archs})
    message(STATUS "skbuild-cudaq: ${_CUDAQ_REALTIME_KEY}: added ${SKBUILD_CUDAQ_KERNEL_${_i}_SOURCES}")
  endforeach()
endfunction()

cmake_policy(POP)

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _cudaq_realtime_auto_add_kernels)
