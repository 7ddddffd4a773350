# SPDX-License-Identifier: Apache-2.0
#[=======================================================================[.rst:
skbuild_cudaq_nvrtc.cmake
-------------------------

The device compiler choice of the ``skbuild_cudaq`` package (included by
``skbuild_cudaqConfig.cmake``): nvcc, or NVRTC from the build's Python
environment (``nvidia-cuda-nvrtc`` for CUDA 13, ``nvidia-cuda-nvrtc-cu12`` for
CUDA 12) when there is no CUDA toolkit.

``SKBUILD_CUDAQ_COMPILER``
  ``auto`` (default): nvcc where one is found, else NVRTC (and the
  configure log says which). ``nvcc`` or ``nvrtc``: that one, or an error
  saying what to install. Set by the ``skbuild_cudaq.build`` backend from
  ``[tool.cudaq] compiler`` or the ``SKBUILD_CUDAQ_COMPILER`` environment
  variable; a plain CMake configure takes that environment variable as the
  cache variable's first value (``SKBUILD_CUDAQ_COMPILER=nvrtc`` builds as a
  machine without a CUDA toolkit does).
``SKBUILD_CUDAQ_NVRTC_MAJOR``
  Optional: the CUDA major of the NVRTC to use (12 or 13) when both are installed.
``SKBUILD_CUDAQ_DEVICE_COMPILER``
  Result: ``nvcc`` or ``nvrtc``. ``SKBUILD_CUDAQ_NVRTC`` holds
  ``<major>.<minor>;<library>`` of the NVRTC used.
``SKBUILD_CUDAQ_PYTHON``
  The Python that runs NVRTC (``python -m skbuild_cudaq nvrtc``): set by the
  backend, else ``Python_EXECUTABLE``/``Python3_EXECUTABLE``, else ``python3``
  on ``PATH``.
#]=======================================================================]

include_guard(GLOBAL)

set(_cudaq_compiler_default "auto")
if(NOT "$ENV{SKBUILD_CUDAQ_COMPILER}" STREQUAL "")
  set(_cudaq_compiler_default "$ENV{SKBUILD_CUDAQ_COMPILER}")  # checked where it is resolved
endif()
set(SKBUILD_CUDAQ_COMPILER "${_cudaq_compiler_default}" CACHE STRING
    "Device compiler for dispatch kernels and side-compiled handlers: auto, nvcc or nvrtc")
unset(_cudaq_compiler_default)  # nothing of ours stays in the caller's scope
set_property(CACHE SKBUILD_CUDAQ_COMPILER PROPERTY STRINGS auto nvcc nvrtc)

#[=[
_cudaq_realtime_python(<out-var>)

The Python interpreter whose environment holds skbuild_cudaq and NVRTC.
#]=]
function(_cudaq_realtime_python out_var)
  foreach(_py IN ITEMS "${SKBUILD_CUDAQ_PYTHON}" "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
    if(_py AND EXISTS "${_py}")
      set(${out_var} "${_py}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  find_program(_SKBUILD_CUDAQ_PYTHON3 NAMES python3 python NO_CACHE)
  set(${out_var} "${_SKBUILD_CUDAQ_PYTHON3}" PARENT_SCOPE)
endfunction()

#[=[
_cudaq_realtime_find_nvrtc(<caller> <required>)

Sets SKBUILD_CUDAQ_NVRTC (cache) to "<major>.<minor>;<library>", or stops with
what to install when <required> is true. A cached result is kept only for the same
Python and SKBUILD_CUDAQ_NVRTC_MAJOR, and while its library exists: a build directory
that stays must not label (and record) one NVRTC while another compiles.
#]=]
function(_cudaq_realtime_find_nvrtc caller required)
  _cudaq_realtime_python(_py)
  set(_for "${_py}|${SKBUILD_CUDAQ_NVRTC_MAJOR}")
  if(SKBUILD_CUDAQ_NVRTC AND _SKBUILD_CUDAQ_NVRTC_FOR STREQUAL _for)
    list(GET SKBUILD_CUDAQ_NVRTC 1 _library)
    if(EXISTS "${_library}")
      return()
    endif()
  endif()
  unset(SKBUILD_CUDAQ_NVRTC CACHE)
  set(_major)
  if(SKBUILD_CUDAQ_NVRTC_MAJOR)
    set(_major --cuda-major "${SKBUILD_CUDAQ_NVRTC_MAJOR}")
  endif()
  set(_out "")
  set(_err "no Python interpreter found (set SKBUILD_CUDAQ_PYTHON)")
  set(_rc 1)
  if(_py)
    execute_process(
      COMMAND "${_py}" -m skbuild_cudaq nvrtc --find ${_major}
      OUTPUT_VARIABLE _out ERROR_VARIABLE _err
      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _rc)
  endif()
  if(NOT _rc EQUAL 0 OR NOT _out)
    if(required)
      _cudaq_realtime_where(${caller} _where)
      string(REGEX REPLACE "^skbuild-cudaq: error: " "" _err "${_err}")
      message(FATAL_ERROR "${_where}: no device compiler: ${_err}")
    endif()
    return()
  endif()
  set(SKBUILD_CUDAQ_NVRTC "${_out}" CACHE INTERNAL "NVRTC used by skbuild-cudaq: version;library")
  set(SKBUILD_CUDAQ_NVRTC_RUNNER "${_py}" CACHE INTERNAL "Python that runs NVRTC")
  set(_SKBUILD_CUDAQ_NVRTC_FOR "${_for}" CACHE INTERNAL "Python|major SKBUILD_CUDAQ_NVRTC is for")
endfunction()

#[=[
_cudaq_realtime_find_device_compiler(<caller>)

Resolves SKBUILD_CUDAQ_COMPILER into SKBUILD_CUDAQ_DEVICE_COMPILER (nvcc or
nvrtc), finding the compiler, and says which one is used.
#]=]
function(_cudaq_realtime_find_device_compiler caller)
  string(TOLOWER "${SKBUILD_CUDAQ_COMPILER}" _choice)
  if(_choice STREQUAL "")
    set(_choice auto)
  endif()
  _cudaq_realtime_python(_py)
  set(_for "${_choice}|${_py}|${SKBUILD_CUDAQ_NVRTC_MAJOR}")
  if(SKBUILD_CUDAQ_DEVICE_COMPILER AND _SKBUILD_CUDAQ_DEVICE_COMPILER_FOR STREQUAL _for)
    return()  # resolved before, for the same choice, Python and NVRTC major
  endif()
  if(NOT _choice MATCHES "^(auto|nvcc|nvrtc)$")
    _cudaq_realtime_where(${caller} _where)
    message(FATAL_ERROR
      "${_where}: SKBUILD_CUDAQ_COMPILER=\"${SKBUILD_CUDAQ_COMPILER}\" is not a device compiler; "
      "use auto, nvcc or nvrtc.")
  endif()
  if(_choice STREQUAL "nvcc")
    _cudaq_realtime_find_nvcc("${caller}")
    set(_used nvcc)
  elseif(_choice STREQUAL "nvrtc")
    _cudaq_realtime_find_nvrtc("${caller}" TRUE)
    set(_used nvrtc)
  else()
    set(_SKBUILD_CUDAQ_NVCC_OPTIONAL TRUE)
    _cudaq_realtime_find_nvcc("${caller}")
    if(SKBUILD_CUDAQ_NVCC)
      set(_used nvcc)
    else()
      _cudaq_realtime_find_nvrtc("${caller}" FALSE)
      if(NOT SKBUILD_CUDAQ_NVRTC)
        # nvcc's own message (every place it looked), then the NVRTC alternative.
        set(_SKBUILD_CUDAQ_NVCC_OPTIONAL FALSE)
        get_property(_majors GLOBAL PROPERTY _SKBUILD_CUDAQ_CUDA_MAJORS)
        set(_wheels)
        foreach(_major IN LISTS _majors)
          get_property(_wheel GLOBAL PROPERTY _SKBUILD_CUDAQ_CUDA_${_major}_nvrtc-wheel)
          list(APPEND _wheels "`${_wheel}` (CUDA ${_major})")
        endforeach()
        list(JOIN _wheels " or " _wheels)
        set(_SKBUILD_CUDAQ_NVCC_ALSO
            " No NVRTC either: to build without a CUDA toolkit, add ${_wheels} to "
            "build-system.requires.")
        string(CONCAT _SKBUILD_CUDAQ_NVCC_ALSO ${_SKBUILD_CUDAQ_NVCC_ALSO})
        _cudaq_realtime_find_nvcc("${caller}")
      endif()
      set(_used nvrtc)
    endif()
  endif()
  set(SKBUILD_CUDAQ_DEVICE_COMPILER "${_used}" CACHE INTERNAL "skbuild-cudaq device compiler")
  set(_SKBUILD_CUDAQ_DEVICE_COMPILER_FOR "${_for}" CACHE INTERNAL
      "its SKBUILD_CUDAQ_COMPILER|Python|SKBUILD_CUDAQ_NVRTC_MAJOR")
  if(_used STREQUAL "nvrtc")
    list(GET SKBUILD_CUDAQ_NVRTC 0 _version)
    list(GET SKBUILD_CUDAQ_NVRTC 1 _library)
    message(STATUS "skbuild-cudaq: device compiler: NVRTC ${_version} (${_library})")
  else()
    message(STATUS "skbuild-cudaq: device compiler: nvcc (${SKBUILD_CUDAQ_NVCC})")
  endif()
endfunction()

#[=[
_cudaq_realtime_add_fatbin_nvrtc(<target> <source> <output> <arch>...)

The NVRTC twin of _cudaq_realtime_add_fatbin: python -m skbuild_cudaq nvrtc
with the target's include directories, definitions and standard.
#]=]
function(_cudaq_realtime_add_fatbin_nvrtc target source output)
  set(_archs)
  foreach(_arch IN LISTS ARGN)
    list(APPEND _archs --arch "${_arch}")
  endforeach()
  set(_inc "$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>")
  set(_defs "$<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>")
  _cudaq_realtime_std_genex(${target} _std)
  set(_major)
  if(SKBUILD_CUDAQ_NVRTC_MAJOR)
    set(_major --cuda-major "${SKBUILD_CUDAQ_NVRTC_MAJOR}")
  endif()
  get_filename_component(_name "${source}" NAME)
  get_filename_component(_src_dir "${source}" DIRECTORY)
  list(GET SKBUILD_CUDAQ_NVRTC 0 _version)
  set(_comment "skbuild-cudaq: NVRTC ${_version} (LTO-IR ${ARGN}) ${_name} for ${target}")
  set(_nvrtc_args ${_major} ${_archs} "--std=${_std}"
      "$<$<BOOL:${_inc}>:-I$<JOIN:${_inc},$<SEMICOLON>-I>>"
      "$<$<BOOL:${_defs}>:-D$<JOIN:${_defs},$<SEMICOLON>-D>>"
      "-I${SKBUILD_CUDAQ_INCLUDE_DIR}")
  if(SKBUILD_CUDAQ_PYTHON)
    # NVRTC and the record naming the kernels and handlers (from NVRTC's PTX of the first
    # architecture, as nvcc -ptx gives it for nvcc-built fatbins), both in the steps runner.
    _cudaq_realtime_step(_compile nvrtc ${_nvrtc_args} --ptx "${output}.ptx"
      --depfile "${output}.d" --dep-target "${output}" -o "${output}" "${source}")
    _cudaq_realtime_step(_record record side --fatbin "${output}" --ptx "${output}.ptx"
      --source "${source}" --project-dir "${CMAKE_SOURCE_DIR}" --nvrtc "${_version}"
      --arch ${ARGN} -o "${output}.json")
    _cudaq_realtime_add_steps(${target} "${source}" "${output}"
      "${SKBUILD_CUDAQ_NVRTC_RUNNER}" "${_comment}" "${_compile}" "${_record}")
    return()
  endif()
  add_custom_command(
    OUTPUT "${output}"
    COMMAND "${SKBUILD_CUDAQ_NVRTC_RUNNER}" -m skbuild_cudaq nvrtc ${_nvrtc_args}
            --depfile "${output}.d" --dep-target "${output}" -o "${output}" "${source}"
    DEPENDS "${source}"
    DEPFILE "${output}.d"
    WORKING_DIRECTORY "${_src_dir}"
    COMMENT "${_comment}"
    COMMAND_EXPAND_LISTS
    VERBATIM)
endfunction()
