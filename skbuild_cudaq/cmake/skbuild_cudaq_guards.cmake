# SPDX-License-Identifier: Apache-2.0
#[=======================================================================[.rst:
skbuild_cudaq_guards.cmake
--------------------------

Included by ``skbuild_cudaqConfig.cmake``: the checks that keep a dispatch kernel from
vanishing silently when a project finds the package but nothing adds its device code.

* Under scikit-build-core (``SKBUILD`` defined) but another build backend than
  ``skbuild_cudaq.build`` (which always passes ``SKBUILD_CUDAQ_KERNEL_COUNT``), a
  ``[tool.cudaq]`` table -- or one whose name looks like it (``cuda-q``, ``cuda_q``,
  ``cudaq-realtime``, ...: without case, ``-``, ``_`` and ``.`` it contains ``cudaq``, the
  rule of ``settings.near_miss_tables``) -- in the project's ``pyproject.toml`` is read by
  nothing: ``find_package`` stops, naming the backend to set.
* Outside that backend, a project that found the package and, by the end of configuring,
  added no device code with it (no ``cudaq_realtime_*`` call on any target) and uses none of
  its headers gets a warning: the built module would carry no dispatch kernel.
#]=======================================================================]

include_guard(GLOBAL)

function(_cudaq_realtime_check_backend)
  if(NOT DEFINED SKBUILD OR DEFINED SKBUILD_CUDAQ_KERNEL_COUNT)
    return()
  endif()
  set(_pyproject "${CMAKE_SOURCE_DIR}/pyproject.toml")
  if(NOT EXISTS "${_pyproject}")
    return()
  endif()
  file(STRINGS "${_pyproject}" _lines REGEX "^[ \t]*\\[\\[?[ \t]*tool[ \t]*\\.")
  foreach(_line IN LISTS _lines)
    string(REGEX REPLACE "^[ \t]*\\[\\[?[ \t]*tool[ \t]*\\.[ \t]*[\"']?([^]\"'. \t]*).*$" "\\1"
           _name "${_line}")
    string(TOLOWER "${_name}" _normal)
    string(REGEX REPLACE "[-_ ]" "" _normal "${_normal}")
    if(NOT _normal MATCHES "cudaq")
      continue()
    endif()
    set(_hint "")
    if(NOT _name STREQUAL "cudaq")
      set(_hint " (did you mean [tool.cudaq]? skbuild-cudaq reads no other table)")
    endif()
    message(FATAL_ERROR
      "skbuild-cudaq: pyproject.toml has a [tool.${_name}] table${_hint}, but the project is "
      "built by another build backend than skbuild-cudaq's: nothing reads the table, so the "
      "dispatch kernels it declares would be missing from the wheel. Set "
      "build-backend = \"skbuild_cudaq.build\" in [build-system] of pyproject.toml (it runs "
      "scikit-build-core and adds what [tool.cudaq] declares).")
  endforeach()
endfunction()

#[=[
_cudaq_realtime_uses_package(<dir> <out_var>)

TRUE when a target of <dir> or of a directory below it has device code from this package
(a property one of the cudaq_realtime_* functions sets) or includes its headers.
#]=]
function(_cudaq_realtime_uses_package dir out_var)
  get_property(_targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(_target IN LISTS _targets)
    foreach(_property IN ITEMS SKBUILD_CUDAQ_SWITCH_SOURCES SKBUILD_CUDAQ_HANDLER_SOURCES
                               SKBUILD_CUDAQ_SKIP_DEVICE_LINK)
      get_target_property(_value ${_target} ${_property})
      if(_value)
        set(${out_var} TRUE PARENT_SCOPE)
        return()
      endif()
    endforeach()
    get_target_property(_type ${_target} TYPE)
    set(_includes "")
    if(NOT _type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(_includes ${_target} INCLUDE_DIRECTORIES)
    endif()
    get_target_property(_interface ${_target} INTERFACE_INCLUDE_DIRECTORIES)
    string(FIND "${_includes};${_interface}" "${SKBUILD_CUDAQ_INCLUDE_DIR}" _at)
    if(_at GREATER_EQUAL 0)
      set(${out_var} TRUE PARENT_SCOPE)
      return()
    endif()
  endforeach()
  get_property(_subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(_subdir IN LISTS _subdirs)
    _cudaq_realtime_uses_package("${_subdir}" _used)
    if(_used)
      set(${out_var} TRUE PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out_var} FALSE PARENT_SCOPE)
endfunction()

# Deferred to the end of the top-level directory by the first find_package.
function(_cudaq_realtime_warn_unused)
  if(DEFINED SKBUILD_CUDAQ_KERNEL_COUNT)
    return()  # the skbuild_cudaq.build backend: [tool.cudaq] says what is added
  endif()
  _cudaq_realtime_uses_package("${CMAKE_SOURCE_DIR}" _used)
  if(NOT _used)
    message(WARNING
      "skbuild-cudaq: find_package(skbuild_cudaq) found the package, but no target received "
      "device code from it: no cudaq_realtime_add_dispatch_kernel() or "
      "cudaq_realtime_add_device_sources() call, and no target uses its headers. The built "
      "module will carry no dispatch kernel. Add the call next to the target that holds the "
      "handlers, or declare the kernel in [tool.cudaq.dispatch-kernels] of pyproject.toml "
      "with build-backend = \"skbuild_cudaq.build\".")
  endif()
endfunction()

_cudaq_realtime_check_backend()
if(NOT CMAKE_SCRIPT_MODE_FILE)  # a script (cmake -P) has no end of configure to wait for
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _cudaq_realtime_warn_unused)
endif()
