# SPDX-License-Identifier: Apache-2.0
#[=======================================================================[.rst:
skbuild_cudaq
-------------

CMake package of skbuild-cudaq: bring your own CUDA-Q realtime dispatch kernel.

.. code-block:: cmake

  find_package(skbuild_cudaq CONFIG REQUIRED)   # found automatically under scikit-build-core
  cudaq_realtime_add_dispatch_kernel(my_app src/my_dispatcher.cu [ARCHITECTURES 80 ...])

A dispatch kernel calls transport hooks that only the run-time bridge defines,
so it cannot be an ordinary CUDA source of the extension (the extension's own
device link would fail on the undefined hooks). Instead each kernel file is
compiled *on its own* to an LTO-IR fatbin and the fatbin is embedded, with
``.incbin``, into the binary's ``__nv_relfatbin`` section -- where nvcc puts the
LTO-IR of ``-rdc`` sources too. At run time skbuild-cudaq reads that section
and links everything with nvJitLink. Nothing here needs the CUDA *language*
to be enabled, and nothing needs a GPU. Needs CMake 3.25 or newer (an older one
stops ``find_package`` with a message saying how to get one).

Commands
^^^^^^^^

.. command:: cudaq_realtime_add_dispatch_kernel

  .. code-block:: cmake

    cudaq_realtime_add_dispatch_kernel(<target> <file.cu>... [ARCHITECTURES <arch>...])

  Compiles each ``<file.cu>`` to its own LTO-IR fatbin
  (``nvcc -fatbin -rdc=true -gencode arch=compute_XX,code=lto_XX`` for every
  architecture) with the *target's* include directories, compile definitions
  and C++ standard (``CUDA_STANDARD``, else ``CXX_STANDARD``, else the highest
  ``cxx_std_NN`` compile feature), plus the package's device headers, and
  embeds it into ``<target>``. A ``.py`` file of GPU handlers (or a dispatch kernel)
  written in Python (``skbuild_cudaq.numba``) is compiled by numba-cuda instead, one
  container per function, and needs no nvcc or NVRTC. The file is *not* added to the target's
  sources, and it reaches a target once: the same file again (in this call, in another
  call, or as a ``[tool.cudaq.dispatch-kernels]`` entry of the target) is an error naming
  both. ``<target>`` is a ``MODULE``, ``SHARED``, ``EXECUTABLE`` or
  ``OBJECT`` library target created before the call, or an ``ALIAS`` of one.
  ``ARCHITECTURES`` defaults to ``80``: LTO-IR built for one architecture
  links for that GPU and every newer one; each must be a number ``>= 80``,
  written bare or as ``sm_80``/``lto_80``/``compute_80`` (the grammar of
  ``[tool.cudaq]``, from ``architectures.txt``; ``90a``-style variants have no
  portable LTO-IR). A kernel built for fewer architectures than the rest of
  ``<target>`` (a cluster kernel, ``ARCHITECTURES 90``) is left out of the run
  time's link on older GPUs; the rest of the target serves there.

  Slips in the arguments stop the configure step with a message naming them:
  ``ARCHITECTURES`` with no value (leave the keyword out for the default), an
  unknown or misspelt keyword (an argument that is no existing file and is
  written in capitals or close to ``ARCHITECTURES``), a source after
  ``ARCHITECTURES``.

  A source path must not be a generator expression (the target's include
  directories and compile definitions may be) nor contain ``; [ ] $ ` " \ | :``
  or a control character (CMake splits ``"a;b.cu"`` into two paths; nvcc hands
  paths to a shell; make and ninja misread ``:`` and ``|``), and a path inside the top-level source
  directory must not be a symbolic link resolving outside it (an sdist would
  ship the link itself).

  The fatbin is rebuilt when the ``.cu`` file or any header it includes
  changes (nvcc ``-MD`` depfile), and only then; the object that embeds it is
  rebuilt when the fatbin changes (``OBJECT_DEPENDS``). nvcc runs in the
  source's directory (it records its working directory in the LTO-IR), so the
  fatbin does not depend on where the build directory is. The target's flags
  may hold generator expressions (``$<CONFIG:...>`` too: under a
  multi-configuration generator such as Ninja Multi-Config, building another
  configuration recompiles the fatbin with that configuration's flags).

.. command:: cudaq_realtime_add_device_sources

  .. code-block:: cmake

    cudaq_realtime_add_device_sources(<target> <file.cu>... [ARCHITECTURES <arch>...])

  The same as :command:`cudaq_realtime_add_dispatch_kernel`, for any device
  code the run time links: use it to *side-compile handlers* so that the
  extension needs no CUDA language (and no device link) at all.

.. command:: cudaq_realtime_add_handlers

  .. code-block:: cmake

    cudaq_realtime_add_handlers(<target> <file.cu>... [ARCHITECTURES <arch>...])

  Adds ``<file.cu>`` to ``<target>`` as ordinary CUDA sources (the project
  must ``enable_language(CUDA)``), compiled by CMake's CUDA rules with
  relocatable device code and LTO architectures
  (``-rdc=true --generate-code=arch=compute_XX,code=[lto_XX]``): nvcc then
  puts their LTO-IR in ``__nv_relfatbin`` itself. If ``<target>`` has no
  other CUDA sources, its ``CUDA_ARCHITECTURES`` is set to ``OFF`` so that no
  unneeded SASS/PTX is generated. Calls
  :command:`cudaq_realtime_target_skip_device_link`.

.. command:: cudaq_realtime_target_skip_device_link

  .. code-block:: cmake

    cudaq_realtime_target_skip_device_link(<target>)

  ``<target>`` (or the target it is an ``ALIAS`` of) is the only argument;
  a second call for the same target does nothing.

  Makes a target whose CUDA sources are compiled with ``-rdc=true`` load
  without a CUDA device link. Why: nvcc's host stub of every ``-rdc`` object
  calls ``__cudaRegisterLinkedBinary_<module id>``, which only a device link
  (``nvcc -dlink``) defines. With LTO-only architectures that device link
  needs ``nvlink -dlto`` and hence ``<nvcc>/../nvvm/lib64/libnvvm.so``, which
  toolkits assembled from wheels (``nvidia-cuda-nvcc``) lack; without it the
  module fails at import with an undefined symbol. skbuild-cudaq never hands
  this code to the CUDA runtime -- the run time reads the LTO-IR from
  ``__nv_relfatbin`` and links it with nvJitLink -- so the registration has
  nothing to do. Before the target links, a ``PRE_LINK`` step reads the
  module ids out of the target's objects and compiles one *weak*, empty
  definition per id into ``<target>_cudaq_no_device_link.o``, which is
  linked in. A real device link (``CUDA_SEPARABLE_COMPILATION ON`` with a
  real architecture) still wins: its definitions are strong. Consequence:
  ``__global__`` functions of such sources cannot be launched through the
  CUDA runtime (``<<<...>>>``) -- launch them through skbuild-cudaq.

Variables
^^^^^^^^^

``SKBUILD_CUDAQ_NVCC``
  The nvcc used for device code (set it to skip the search). Searched in the
  order that ``nvcc-search.txt`` of this package defines, the same order the
  Python side (``skbuild_cudaq.build._toolchain``) uses: ``CMAKE_CUDA_COMPILER``
  (CMake variable, then environment variable), the ``CUDACXX`` environment
  variable, ``PATH`` (only ``PATH``), ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``,
  ``/usr/local/cuda/bin``, ``/opt/cuda/bin`` (these two replaced by the
  ``:``-separated roots of the ``SKBUILD_CUDAQ_CUDA_ROOTS`` environment
  variable when it is set), and the ``nvidia-cuda-nvcc`` wheel:
  ``SKBUILD_CUDAQ_NVCC_HINT`` (set by the ``skbuild_cudaq.build`` backend),
  else asked of the build's Python (``Python_EXECUTABLE``). A variable that is
  set but names no executable is an error; when nothing is found the error
  lists every place tried.

``SKBUILD_CUDAQ_INCLUDE_DIR``
  The package's headers: the device headers
  (``cudaq/realtime/unified_dispatch_device.cuh``) and the native host handlers' header
  (``cudaq/realtime/host_handler.h``, plain C: add the directory to an extension that
  exports host handlers with ``CUDAQ_REALTIME_EXPORT_HOST_FUNCTION``).

``SKBUILD_CUDAQ_COMPILER``
  The device compiler of dispatch kernels and side-compiled handlers: ``auto``
  (default: nvcc where found, else NVRTC from the build's Python environment),
  ``nvcc`` or ``nvrtc`` (``[tool.cudaq] compiler``). With NVRTC, the fatbins
  are made by ``python -m skbuild_cudaq nvrtc`` (the ``nvidia-cuda-nvrtc`` or
  ``nvidia-cuda-nvrtc-cu12`` wheel; ``SKBUILD_CUDAQ_NVRTC_MAJOR`` picks a major
  when both are installed), and :command:`cudaq_realtime_add_handlers`
  side-compiles when the CUDA language is off. The result is in
  ``SKBUILD_CUDAQ_DEVICE_COMPILER``; see ``skbuild_cudaq_nvrtc.cmake``.

``SKBUILD_CUDAQ_HANDLER_SWITCH``
  ``ON`` (default) or ``OFF``: whether each target with device sources gets a
  *handler switch*, a generated definition of the device hooks
  ``cudaq_dev_call_handler`` and ``cudaq_dev_call_launch_handler`` that call
  each thread-shaped (the first) and launch-wide (the second) handler its
  device sources export directly (LTO inlines it into the dispatch kernel) and
  any other through the pointer. Exports are the lines starting with
  ``CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(<name>)`` or
  ``CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(<name>)``; the switch is written by
  ``SKBUILD_CUDAQ_PYTHON`` at the end of the top-level directory into
  ``cudaq_realtime/<target>/handler_switch.cu`` of the build tree and embedded
  like a dispatch kernel. Results are the same without it; only the calls cost
  more.

``SKBUILD_CUDAQ_PYTHON``
  The Python that writes the build records naming each device source's
  kernels and exported handlers (``python -m skbuild_cudaq inspect`` shows
  them): ``Python_EXECUTABLE`` or ``Python3_EXECUTABLE`` (scikit-build-core
  sets both), else any Python 3 found. Set it empty to build without records.
  For a side-compiled source the record comes from one extra ``nvcc -ptx``
  (same flags, first architecture); for sources compiled into the target by
  nvcc, from the objects, at link time (the ``PRE_LINK`` step of
  :command:`cudaq_realtime_target_skip_device_link`). Records go in the
  section ``__cudaq_rt_info`` (flags ``"aR"``, 8-aligned) of the binary.
#]=======================================================================]

include_guard(GLOBAL)

# The one minimum, the one the docs state and the tests run: older CMakes lack
# find_program(NO_CACHE) (3.21), which the nvcc search relies on.
if(CMAKE_VERSION VERSION_LESS 3.25)
  message(FATAL_ERROR
    "skbuild_cudaq needs CMake >= 3.25 (found ${CMAKE_VERSION}). "
    "Set `cmake.version = \">=3.25\"` in [tool.scikit-build] of pyproject.toml "
    "(scikit-build-core then fetches a newer cmake), or run a newer CMake "
    "(`pip install cmake`).")
endif()

cmake_policy(PUSH)
# Functions record the policies in effect where they are defined.
cmake_policy(VERSION 3.25...4.0)
include("${CMAKE_CURRENT_LIST_DIR}/skbuild_cudaq_nvrtc.cmake")

get_filename_component(SKBUILD_CUDAQ_INCLUDE_DIR "${CMAKE_CURRENT_LIST_DIR}/../include" ABSOLUTE)
set(SKBUILD_CUDAQ_INCLUDE_DIR "${SKBUILD_CUDAQ_INCLUDE_DIR}"
    CACHE INTERNAL "skbuild-cudaq headers (device headers, host_handler.h)")
set(_SKBUILD_CUDAQ_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}"
    CACHE INTERNAL "skbuild-cudaq CMake package directory")
#[=[
_cudaq_realtime_load_tables()

Reads the tables next to this file into global properties, which every directory
sees (a variable would live only in the directory that first called find_package:
a sibling directory's find_package is skipped by the include guard, and the
deferred handler switch runs in the top-level directory):

- architectures.txt, the architecture grammar that skbuild_cudaq/_architectures.py
  reads too: _SKBUILD_CUDAQ_ARCH_<key> for prefixes, minimum, maximum, default;
- nvcc-recipe.txt, the nvcc command lines that skbuild_cudaq/build/_embed.py reads
  too: _SKBUILD_CUDAQ_RECIPE_<name>, the argument words;
- cuda-majors.txt, what differs between CUDA majors (skbuild_cudaq/_cuda_majors.py reads
  it too): _SKBUILD_CUDAQ_CUDA_MAJORS (newest first) and _SKBUILD_CUDAQ_CUDA_<major>_<key>;
- _SKBUILD_CUDAQ_UNSAFE_PATH, the characters a source path must not contain
  (skbuild_cudaq.settings.UNSAFE_PATH_CHARS, and the control characters CMake can
  write): CMake splits lists at ";" and keeps "[...]" together across ";", nvcc hands
  paths to a shell ("$", "`"), make and ninja misread ":" and "|", and quotes,
  backslashes and newlines break the generated sources.

A function, so that its loop variables stay out of the caller's scope. Also sets
the cache variable SKBUILD_CUDAQ_DEFAULT_ARCHITECTURES.
#]=]
function(_cudaq_realtime_load_tables)
  file(STRINGS "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/architectures.txt" _grammar REGEX "^[a-z]")
  foreach(_line IN LISTS _grammar)
    string(REGEX REPLACE "#.*" "" _line "${_line}")
    string(STRIP "${_line}" _line)
    string(REGEX REPLACE " +" ";" _words "${_line}")
    list(POP_FRONT _words _key)
    set_property(GLOBAL PROPERTY _SKBUILD_CUDAQ_ARCH_${_key} ${_words})
  endforeach()
  get_property(_default GLOBAL PROPERTY _SKBUILD_CUDAQ_ARCH_default)
  set(SKBUILD_CUDAQ_DEFAULT_ARCHITECTURES "${_default}" CACHE INTERNAL
      "skbuild-cudaq: architectures of a dispatch kernel that names none")
  file(STRINGS "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/nvcc-recipe.txt" _recipes REGEX "^[a-z]")
  foreach(_line IN LISTS _recipes)
    string(REGEX REPLACE " +" ";" _words "${_line}")
    list(POP_FRONT _words _key)
    set_property(GLOBAL PROPERTY _SKBUILD_CUDAQ_RECIPE_${_key} ${_words})
  endforeach()
  file(STRINGS "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/cuda-majors.txt" _majors REGEX "^[0-9]")
  set(_seen)
  foreach(_line IN LISTS _majors)
    string(REGEX REPLACE "#.*" "" _line "${_line}")
    string(STRIP "${_line}" _line)
    string(REGEX REPLACE " +" ";" _words "${_line}")
    list(POP_FRONT _words _major _key)
    set_property(GLOBAL PROPERTY _SKBUILD_CUDAQ_CUDA_${_major}_${_key} ${_words})
    list(APPEND _seen ${_major})
  endforeach()
  list(REMOVE_DUPLICATES _seen)
  list(SORT _seen COMPARE NATURAL ORDER DESCENDING)
  set_property(GLOBAL PROPERTY _SKBUILD_CUDAQ_CUDA_MAJORS ${_seen})
  set_property(GLOBAL PROPERTY _SKBUILD_CUDAQ_UNSAFE_PATH "[][;$`\"|:\\\n\r\t]")
endfunction()
_cudaq_realtime_load_tables()

#[=[
_cudaq_realtime_where(<caller> <out-var>)

The prefix of every message: the pyproject key when the call came from
[tool.cudaq] (the auto include sets _CUDAQ_REALTIME_KEY), else the command.
#]=]
function(_cudaq_realtime_where caller out_var)
  if(DEFINED _CUDAQ_REALTIME_KEY)
    set(${out_var} "skbuild-cudaq: ${_CUDAQ_REALTIME_KEY}" PARENT_SCOPE)
  else()
    set(${out_var} "skbuild-cudaq: ${caller}" PARENT_SCOPE)
  endif()
endfunction()

#[=[
_cudaq_realtime_nvcc_program(<out-var> <name-or-path>)

<out-var> is the executable <name-or-path> names (an absolute path, or a
program on PATH and only PATH -- what Python's shutil.which does), else empty.
#]=]
function(_cudaq_realtime_nvcc_program out_var value)
  unset(_found)
  if(IS_ABSOLUTE "${value}")
    get_filename_component(_dir "${value}" DIRECTORY)
    get_filename_component(_name "${value}" NAME)
    find_program(_found NAMES "${_name}" PATHS "${_dir}" NO_DEFAULT_PATH NO_CACHE)
  else()
    find_program(_found NAMES "${value}" PATHS ENV PATH NO_DEFAULT_PATH NO_CACHE)
  endif()
  if(_found)
    set(${out_var} "${_found}" PARENT_SCOPE)
  else()
    set(${out_var} "" PARENT_SCOPE)
  endif()
endfunction()

#[=[
_cudaq_realtime_nvcc_from_wheel(<out-var> <tried-var> <wheel>)

The nvcc of the <wheel> distribution: SKBUILD_CUDAQ_NVCC_HINT (set by the
skbuild_cudaq.build backend), else asked of the build's Python
(Python_EXECUTABLE, Python3_EXECUTABLE) with this package's own _toolchain.py.
#]=]
function(_cudaq_realtime_nvcc_from_wheel out_var tried_var wheel)
  set(${out_var} "" PARENT_SCOPE)
  if(SKBUILD_CUDAQ_NVCC_HINT AND EXISTS "${SKBUILD_CUDAQ_NVCC_HINT}")
    set(${out_var} "${SKBUILD_CUDAQ_NVCC_HINT}" PARENT_SCOPE)
    return()
  endif()
  get_filename_component(_root "${_SKBUILD_CUDAQ_CMAKE_DIR}/../.." ABSOLUTE)
  set(_asked)
  foreach(_py IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
    if(NOT _py OR NOT EXISTS "${_py}" OR _py IN_LIST _asked)
      continue()
    endif()
    list(APPEND _asked "${_py}")
    execute_process(
      COMMAND "${_py}" -c
              "import sys; sys.path.insert(0, sys.argv[1]); from skbuild_cudaq.build._toolchain import nvcc_from_wheel, wheel_names; p = nvcc_from_wheel(wheel_names(sys.argv[2])); print(p or '')"
              "${_root}" "${wheel}"
      OUTPUT_VARIABLE _from_wheel OUTPUT_STRIP_TRAILING_WHITESPACE
      ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND _from_wheel AND EXISTS "${_from_wheel}")
      set(${out_var} "${_from_wheel}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  if(_asked)
    list(JOIN _asked ", " _asked)
    set(${tried_var} "the ${wheel} wheel: not installed for ${_asked}" PARENT_SCOPE)
  else()
    set(${tried_var} "the ${wheel} wheel: no Python to ask (set Python_EXECUTABLE)" PARENT_SCOPE)
  endif()
endfunction()

#[=[
_cudaq_realtime_find_nvcc(<caller>)

Sets the cache variable SKBUILD_CUDAQ_NVCC (unless already set to an existing
file), or stops with every place tried and what to install. The order is
nvcc-search.txt next to this file, which skbuild_cudaq/build/_toolchain.py reads too.
#]=]
function(_cudaq_realtime_find_nvcc caller)
  if(SKBUILD_CUDAQ_NVCC AND EXISTS "${SKBUILD_CUDAQ_NVCC}")
    return()
  endif()
  _cudaq_realtime_where(${caller} _where)
  file(STRINGS "${_SKBUILD_CUDAQ_CMAKE_DIR}/nvcc-search.txt" _steps REGEX "^[a-z]")
  if(DEFINED ENV{SKBUILD_CUDAQ_CUDA_ROOTS})
    # Its entries replace the `root` lines, where the first of them stood.
    string(REPLACE ":" ";" _roots "$ENV{SKBUILD_CUDAQ_CUDA_ROOTS}")
    set(_expanded)
    foreach(_step IN LISTS _steps)
      if(_step MATCHES "^root ")
        foreach(_r IN LISTS _roots)
          if(_r)
            list(APPEND _expanded "root ${_r}")
          endif()
        endforeach()
        set(_roots)
      else()
        list(APPEND _expanded "${_step}")
      endif()
    endforeach()
    set(_steps ${_expanded})
  endif()
  set(_tried)
  unset(_nvcc)
  foreach(_step IN LISTS _steps)
    string(REGEX MATCH "^([a-z-]+)[ ]*(.*)$" _m "${_step}")
    set(_kind "${CMAKE_MATCH_1}")
    string(STRIP "${CMAKE_MATCH_2}" _arg)
    if(_kind STREQUAL "cmake-variable" OR _kind STREQUAL "env")
      if(_kind STREQUAL "env")
        set(_value "$ENV{${_arg}}")
        set(_origin "environment")
      else()
        set(_value "${${_arg}}")
        set(_origin "CMake variable")
      endif()
      # NOTFOUND: what check_language(CUDA) leaves when CMake finds no nvcc (not a user's value)
      if(_value STREQUAL "" OR _value MATCHES "(^|-)NOTFOUND$")
        list(APPEND _tried "${_arg} (${_origin}): not set")
        continue()
      endif()
      _cudaq_realtime_nvcc_program(_nvcc "${_value}")
      if(NOT _nvcc)
        message(FATAL_ERROR
          "${_where}: ${_arg}='${_value}' (${_origin}) does not name an executable nvcc; fix or "
          "unset it. Install a CUDA toolkit and set CUDA_HOME to it (or put its bin directory on "
          "PATH, or set CMAKE_CUDA_COMPILER to its nvcc), or `pip install nvidia-cuda-nvcc` (add "
          "it to build-system.requires).")
      endif()
    elseif(_kind STREQUAL "path")
      find_program(_nvcc NAMES "${_arg}" PATHS ENV PATH NO_DEFAULT_PATH NO_CACHE)
      if(NOT _nvcc)
        list(APPEND _tried "${_arg} on PATH ($ENV{PATH}): not found")
      endif()
    elseif(_kind STREQUAL "root-env")
      if("$ENV{${_arg}}" STREQUAL "")
        list(APPEND _tried "\$${_arg}/bin/nvcc: ${_arg} not set")
        continue()
      endif()
      _cudaq_realtime_nvcc_program(_nvcc "$ENV{${_arg}}/bin/nvcc")
      if(NOT _nvcc)
        list(APPEND _tried "\$${_arg}/bin/nvcc: $ENV{${_arg}}/bin/nvcc not found")
      endif()
    elseif(_kind STREQUAL "root")
      _cudaq_realtime_nvcc_program(_nvcc "${_arg}/bin/nvcc")
      if(NOT _nvcc)
        list(APPEND _tried "${_arg}/bin/nvcc: not found")
      endif()
    elseif(_kind STREQUAL "wheel")
      _cudaq_realtime_nvcc_from_wheel(_nvcc _why "${_arg}")
      if(NOT _nvcc)
        list(APPEND _tried "${_why}")
      endif()
    endif()
    if(_nvcc)
      break()
    endif()
  endforeach()
  if(NOT _nvcc AND _SKBUILD_CUDAQ_NVCC_OPTIONAL)
    return()  # compiler = auto: NVRTC next (skbuild_cudaq_nvrtc.cmake)
  endif()
  if(NOT _nvcc)
    set(_places "")
    foreach(_t IN LISTS _tried)
      string(APPEND _places "\n  - ${_t}")
    endforeach()
    message(FATAL_ERROR
      "${_where}: nvcc not found: it compiles the dispatch kernels to LTO-IR. Looked in, in "
      "order:${_places}\nInstall a CUDA toolkit and set CUDA_HOME to it (or put its bin directory "
      "on PATH, or set CMAKE_CUDA_COMPILER to its nvcc), or `pip install nvidia-cuda-nvcc` (add "
      "it to build-system.requires).${_SKBUILD_CUDAQ_NVCC_ALSO}")
  endif()
  set(SKBUILD_CUDAQ_NVCC "${_nvcc}" CACHE FILEPATH "nvcc used by skbuild-cudaq for device code" FORCE)
  message(STATUS "skbuild-cudaq: nvcc: ${_nvcc}")
endfunction()

#[=[
_cudaq_realtime_find_python()

Sets SKBUILD_CUDAQ_PYTHON: the Python that writes the device-code records
(Python_EXECUTABLE or Python3_EXECUTABLE, as scikit-build-core sets them, else
any Python 3 found). Empty when there is none: modules then carry no records
and `inspect` shows their containers unnamed.
#]=]
function(_cudaq_realtime_find_python)
  if(DEFINED SKBUILD_CUDAQ_PYTHON)
    return()
  endif()
  set(_py "")
  foreach(_candidate IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
    if(_candidate AND EXISTS "${_candidate}")
      set(_py "${_candidate}")
      break()
    endif()
  endforeach()
  if(NOT _py)
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      set(_py "${Python3_EXECUTABLE}")
    else()
      message(STATUS "skbuild-cudaq: no Python found: device code is embedded without the "
                     "records that name its kernels and handlers (set Python_EXECUTABLE)")
    endif()
  endif()
  set(SKBUILD_CUDAQ_PYTHON "${_py}" CACHE FILEPATH
      "Python that writes skbuild-cudaq's device-code records (empty: none)")
endfunction()

#[=[
_cudaq_realtime_check_target(<caller> <target> <out-var>)

The target exists and is a kind whose link keeps embedded objects; <out-var> is
the target itself, or the target an ALIAS target names (properties and sources
can only be set on that one).
#]=]
function(_cudaq_realtime_check_target caller target out_var)
  _cudaq_realtime_where(${caller} _where)
  if(NOT TARGET "${target}")
    _cudaq_realtime_did_you_mean("${target}" _hint)
    message(FATAL_ERROR
      "${_where}: no CMake target named \"${target}\". Create the target (add_library, "
      "python_add_library, nanobind_add_module, ...) before this call, or correct the name."
      "${_hint}")
  endif()
  get_target_property(_type "${target}" TYPE)
  if(NOT _type MATCHES "^(MODULE_LIBRARY|SHARED_LIBRARY|EXECUTABLE|OBJECT_LIBRARY)$")
    message(FATAL_ERROR
      "${_where}: target \"${target}\" is a ${_type}; device code can only be embedded into a "
      "MODULE, SHARED, EXECUTABLE or OBJECT target (a static library member that nothing "
      "references would be dropped by the linker).")
  endif()
  get_target_property(_imported "${target}" IMPORTED)
  if(_imported)
    message(FATAL_ERROR "${_where}: target \"${target}\" is IMPORTED; use a target of this project.")
  endif()
  get_target_property(_aliased "${target}" ALIASED_TARGET)
  if(_aliased)
    set(${out_var} "${_aliased}" PARENT_SCOPE)
  else()
    set(${out_var} "${target}" PARENT_SCOPE)
  endif()
endfunction()

#[=[
_cudaq_realtime_check_architectures(<caller> <out-var> <arch>...)

Validates LTO architectures in the grammar of architectures.txt (a number from
its minimum to its maximum, bare or prefixed: 80, sm_80, lto_80, compute_80; no 90a-style
variants, which have no portable LTO-IR) and returns them as bare numbers;
default: SKBUILD_CUDAQ_DEFAULT_ARCHITECTURES.
#]=]
function(_cudaq_realtime_check_architectures caller out_var)
  set(_archs ${ARGN})
  if(NOT _archs)
    set(_archs ${SKBUILD_CUDAQ_DEFAULT_ARCHITECTURES})
  endif()
  _cudaq_realtime_where(${caller} _where)
  get_property(_prefixes GLOBAL PROPERTY _SKBUILD_CUDAQ_ARCH_prefixes)
  get_property(_min GLOBAL PROPERTY _SKBUILD_CUDAQ_ARCH_minimum)
  get_property(_max GLOBAL PROPERTY _SKBUILD_CUDAQ_ARCH_maximum)
  string(REPLACE ";" "|" _prefixes "${_prefixes}")
  set(_numbers)
  foreach(_arch IN LISTS _archs)
    set(_number "")
    if(_arch MATCHES "^((${_prefixes})_)?0*([0-9]+)$")
      set(_number "${CMAKE_MATCH_3}")
    endif()
    string(LENGTH "${_number}" _digits)
    if(_number STREQUAL "" OR _digits GREATER 9 OR _number LESS _min
       OR _number GREATER _max)
      message(FATAL_ERROR
        "${_where}: architecture \"${_arch}\" is not supported: dispatch kernels are LTO-IR for "
        "sm_${_min} or newer. Use a number >= ${_min} such as 80 or 90 (LTO-IR built for one "
        "architecture links for that GPU and every newer one).")
    endif()
    list(APPEND _numbers "${_number}")
  endforeach()
  list(REMOVE_DUPLICATES _numbers)
  set(${out_var} ${_numbers} PARENT_SCOPE)
endfunction()

#[=[
_cudaq_realtime_check_argument(<caller> <path>)

Stops when <path> is a generator expression or holds a character of
_SKBUILD_CUDAQ_UNSAFE_PATH (a global property).
#]=]
function(_cudaq_realtime_check_argument caller arg)
  get_property(_unsafe GLOBAL PROPERTY _SKBUILD_CUDAQ_UNSAFE_PATH)
  if(arg MATCHES "\\$<")
    _cudaq_realtime_where(${caller} _where)
    message(FATAL_ERROR
      "${_where}: source \"${arg}\" is a generator expression; pass the file's path: each "
      "source is compiled by its own command, named when CMake configures. For code that "
      "depends on the configuration, test a compile definition of the target in the source "
      "(target_compile_definitions(<target> PRIVATE $<$<CONFIG:Debug>:MY_DEBUG>)).")
  endif()
  if(arg MATCHES "${_unsafe}")
    _cudaq_realtime_where(${caller} _where)
    message(FATAL_ERROR
      "${_where}: source path \"${arg}\" contains one of ; [ ] $ ` \" \\ | : or a control "
      "character, which CMake, make or nvcc would misread (CMake splits a path at ; into two "
      "paths); rename the file or its directory.")
  endif()
endfunction()

#[=[
_cudaq_realtime_check_arguments(<caller> <argc>)

A macro, so that it sees the calling function's ARGV1...ARGV<argc - 1>: each
argument as the user wrote it, before a ";" inside it splits it into two paths
(the second may point anywhere).
#]=]
macro(_cudaq_realtime_check_arguments caller argc)
  if(${argc} GREATER 1)
    math(EXPR _cudaq_last "${argc} - 1")
    foreach(_cudaq_i RANGE 1 ${_cudaq_last})
      _cudaq_realtime_check_argument("${caller}" "${ARGV${_cudaq_i}}")
    endforeach()
  endif()
endmacro()

#[=[
_cudaq_realtime_resolve_sources(<caller> <out-var> <file>...)

Absolute, existing paths (relative ones are taken from the current source dir),
without characters CMake, make or nvcc misread, and -- for a path inside the
top-level source directory -- really inside it: a symbolic link that resolves
outside the project is refused (an sdist would ship the link itself).
#]=]
function(_cudaq_realtime_resolve_sources caller out_var)
  _cudaq_realtime_where(${caller} _where)
  if(NOT ARGN)
    message(FATAL_ERROR "${_where}: no source files given; pass at least one .cu file.")
  endif()
  file(REAL_PATH "${CMAKE_SOURCE_DIR}" _top_real)
  get_property(_unsafe GLOBAL PROPERTY _SKBUILD_CUDAQ_UNSAFE_PATH)
  set(_out)
  foreach(_file IN LISTS ARGN)
    _cudaq_realtime_check_argument("${caller}" "${_file}")
    get_filename_component(_abs "${_file}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(NOT EXISTS "${_abs}" OR IS_DIRECTORY "${_abs}")
      message(FATAL_ERROR "${_where}: source file \"${_file}\" does not exist (looked for ${_abs}).")
    endif()
    if(_abs MATCHES "${_unsafe}")
      message(FATAL_ERROR
        "${_where}: source path \"${_abs}\" contains one of ; [ ] $ ` \" \\ | : or a control "
        "character in its directories, which CMake, make or nvcc would misread; move the "
        "project to a directory without them.")
    endif()
    file(REAL_PATH "${_abs}" _real)
    cmake_path(IS_PREFIX CMAKE_SOURCE_DIR "${_abs}" NORMALIZE _in_project)
    cmake_path(IS_PREFIX _top_real "${_real}" NORMALIZE _really_in_project)
    if(_in_project AND NOT _really_in_project)
      message(FATAL_ERROR
        "${_where}: source file \"${_file}\" is a symbolic link (or lies under one) that "
        "resolves outside the project, to ${_real}. Copy the file into the project: an sdist "
        "ships the link itself, which points nowhere on another machine.")
    endif()
    list(APPEND _out "${_abs}")
  endforeach()
  set(${out_var} ${_out} PARENT_SCOPE)
endfunction()

#[=[
_cudaq_realtime_std_genex(<target> <out-var>)

A generator expression giving -std=c++NN from the target's CUDA_STANDARD, else
CXX_STANDARD, else its highest cxx_std_NN / cuda_std_NN compile feature, else
nothing (nvcc's default).
#]=]
function(_cudaq_realtime_std_genex target out_var)
  set(_features "$<TARGET_PROPERTY:${target},COMPILE_FEATURES>")
  set(_from_features "")
  foreach(_std IN ITEMS 11 14 17 20 23 26)
    set(_has "$<OR:$<IN_LIST:cxx_std_${_std},${_features}>,$<IN_LIST:cuda_std_${_std},${_features}>>")
    set(_from_features "$<IF:${_has},-std=c++${_std},${_from_features}>")
  endforeach()
  set(_cuda "$<TARGET_PROPERTY:${target},CUDA_STANDARD>")
  set(_cxx "$<TARGET_PROPERTY:${target},CXX_STANDARD>")
  set(${out_var}
      "$<IF:$<BOOL:${_cuda}>,-std=c++${_cuda},$<IF:$<BOOL:${_cxx}>,-std=c++${_cxx},${_from_features}>>"
      PARENT_SCOPE)
endfunction()

#[=[
_cudaq_realtime_nvcc_recipe(<recipe> <out-var> SOURCE <file> OUTPUT <file> [DEPFILE <file>]
                            ARCHITECTURES <arch>... FLAGS <option>...)

The nvcc arguments (nvcc itself not included) of <recipe> of nvcc-recipe.txt:
the one definition of the command lines, which skbuild_cudaq/build/_embed.py
fills in the same way. Run them in the source's directory.
#]=]
function(_cudaq_realtime_nvcc_recipe recipe out_var)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "" "SOURCE;OUTPUT;DEPFILE" "ARCHITECTURES;FLAGS")
  list(GET ARG_ARCHITECTURES 0 _first)
  get_property(_words GLOBAL PROPERTY _SKBUILD_CUDAQ_RECIPE_${recipe})
  set(_args)
  foreach(_word IN LISTS _words)
    if(_word STREQUAL "<gencode>")
      foreach(_arch IN LISTS ARG_ARCHITECTURES)
        list(APPEND _args -gencode "arch=compute_${_arch},code=lto_${_arch}")
      endforeach()
    elseif(_word STREQUAL "<host-compiler>")
      if(CMAKE_CUDA_HOST_COMPILER)
        list(APPEND _args "--compiler-bindir=${CMAKE_CUDA_HOST_COMPILER}")
      endif()
    elseif(_word STREQUAL "<flags>")
      list(APPEND _args ${ARG_FLAGS})
    elseif(_word STREQUAL "<depfile>")
      if(ARG_DEPFILE)
        # nvcc does not escape spaces in the depfile's target: name it ourselves (make syntax).
        string(REPLACE " " "\\ " _target "${ARG_OUTPUT}")
        list(APPEND _args -MD -MF "${ARG_DEPFILE}" -MT "${_target}")
      endif()
    elseif(_word STREQUAL "<output>")
      list(APPEND _args "${ARG_OUTPUT}")
    elseif(_word STREQUAL "<source>")
      list(APPEND _args "${ARG_SOURCE}")
    else()
      string(REPLACE "<arch>" "${_first}" _word "${_word}")
      list(APPEND _args "${_word}")
    endif()
  endforeach()
  set(${out_var} "${_args}" PARENT_SCOPE)
endfunction()

#[=[
_cudaq_realtime_step(<out-var> <kind> <argument>...)

One step of a steps file (skbuild_cudaq/build/_device_compile.py): "step <kind>", one
argument per line, "end". The arguments may be generator expressions holding
$<SEMICOLON> lists (as for COMMAND_EXPAND_LISTS): each list element gets a line.
#]=]
function(_cudaq_realtime_step out_var kind)
  string(REPLACE ";" "\n" _lines "${ARGN}")
  string(REPLACE "$<SEMICOLON>" "\n" _lines "${_lines}")
  set(${out_var} "step ${kind}\n${_lines}\nend\n" PARENT_SCOPE)
endfunction()

#[=[
_cudaq_realtime_per_config(<out-var>)

"" under a single-configuration generator, else "-$<CONFIG>": the suffix of a
file(GENERATE) output whose content may depend on the configuration (a target's
``$<CONFIG:...>`` definitions, its object files), which a multi-configuration
generator (Ninja Multi-Config, Xcode) writes once per configuration.
#]=]
function(_cudaq_realtime_per_config out_var)
  get_property(_multi GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
  if(_multi)
    set(${out_var} "-$<CONFIG>" PARENT_SCOPE)
  else()
    set(${out_var} "" PARENT_SCOPE)
  endif()
endfunction()

#[=[
_cudaq_realtime_add_steps(<target> <source> <output> <python> <comment> <step>...)

The custom command of a side-compiled source when Python runs it: <step>s (from
_cudaq_realtime_step) go into <output>.steps (<output>-<config>.steps under a
multi-configuration generator), written at generate time (file(GENERATE): the target's
flags are generator expressions; rewritten only when they change, and then the command
runs again), and the command is "<python> _run_device_compile.py <output>.steps",
run next to the source. Short, so that ninja's FAILED line does not hide the compiler's
diagnostics; the runner ends a failure with one line naming <source> and <target>.
Outputs: <output> and its record <output>.json; dependencies from <output>.d.
#]=]
function(_cudaq_realtime_add_steps target source output python comment)
  get_filename_component(_src_dir "${source}" DIRECTORY)
  string(CONCAT _content "skbuild-cudaq device compile 1\n" "target\n${target}\n"
         "source\n${source}\n" "project-dir\n${CMAKE_SOURCE_DIR}\n" ${ARGN})
  _cudaq_realtime_per_config(_config)
  set(_steps "${output}${_config}.steps")
  file(GENERATE OUTPUT "${_steps}" CONTENT "${_content}")
  add_custom_command(
    OUTPUT "${output}" "${output}.json"
    COMMAND "${python}" "${_SKBUILD_CUDAQ_CMAKE_DIR}/_run_device_compile.py" "${_steps}"
    DEPENDS "${source}" "${_steps}"
    DEPFILE "${output}.d"
    # nvcc records its working directory in the LTO-IR: run it next to the source so that
    # the fatbin does not depend on where the build directory is (reproducible wheels).
    WORKING_DIRECTORY "${_src_dir}"
    COMMENT "${comment}"
    VERBATIM)
endfunction()

#[=[
_cudaq_realtime_add_fatbin(<target> <source> <output> <arch>...)

The custom command: the ``fatbin`` recipe (nvcc -fatbin -rdc=true, one
code=lto_XX per arch, the target's include directories / definitions /
standard, -MD depfile) and, with Python, the ``ptx`` recipe and the build
record, run by the steps runner (_cudaq_realtime_add_steps). The output
directory exists already (made at configure time).
#]=]
function(_cudaq_realtime_add_fatbin target source output)
  if(source MATCHES "[.]py$")
    _cudaq_realtime_add_fatbin_python(${target} "${source}" "${output}" ${ARGN})
    return()
  endif()
  if(SKBUILD_CUDAQ_DEVICE_COMPILER STREQUAL "nvrtc")
    _cudaq_realtime_add_fatbin_nvrtc(${target} "${source}" "${output}" ${ARGN})
    return()
  endif()
  set(_inc "$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>")
  set(_defs "$<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>")
  _cudaq_realtime_std_genex(${target} _std)
  get_filename_component(_name "${source}" NAME)
  get_filename_component(_src_dir "${source}" DIRECTORY)
  # $<SEMICOLON>: one list element per option once COMMAND_EXPAND_LISTS expands it.
  set(_flags "${_std}"
      "$<$<BOOL:${_inc}>:-I$<JOIN:${_inc},$<SEMICOLON>-I>>"
      "$<$<BOOL:${_defs}>:-D$<JOIN:${_defs},$<SEMICOLON>-D>>"
      "-I${SKBUILD_CUDAQ_INCLUDE_DIR}")
  _cudaq_realtime_nvcc_recipe(fatbin _fatbin_args SOURCE "${source}" OUTPUT "${output}"
    DEPFILE "${output}.d" ARCHITECTURES ${ARGN} FLAGS ${_flags})
  set(_comment "skbuild-cudaq: nvcc (LTO-IR ${ARGN}) ${_name} for ${target}")
  if(SKBUILD_CUDAQ_PYTHON)
    # The record naming the kernels and handlers: PTX of the first architecture (same flags),
    # whose .visible .entry / cudaq_handler_* lines are what the source defines.
    _cudaq_realtime_nvcc_recipe(ptx _ptx_args SOURCE "${source}" OUTPUT "${output}.ptx"
      ARCHITECTURES ${ARGN} FLAGS ${_flags})
    _cudaq_realtime_step(_compile nvcc "${SKBUILD_CUDAQ_NVCC}" ${_fatbin_args})
    _cudaq_realtime_step(_ptx nvcc "${SKBUILD_CUDAQ_NVCC}" ${_ptx_args})
    _cudaq_realtime_step(_record record side --fatbin "${output}" --ptx "${output}.ptx"
      --source "${source}" --project-dir "${CMAKE_SOURCE_DIR}" --nvcc "${SKBUILD_CUDAQ_NVCC}"
      --arch ${ARGN} -o "${output}.json")
    _cudaq_realtime_add_steps(${target} "${source}" "${output}" "${SKBUILD_CUDAQ_PYTHON}"
      "${_comment}" "${_compile}" "${_ptx}" "${_record}")
    return()
  endif()
  add_custom_command(
    OUTPUT "${output}"
    COMMAND "${SKBUILD_CUDAQ_NVCC}" ${_fatbin_args}
    DEPENDS "${source}"
    DEPFILE "${output}.d"
    WORKING_DIRECTORY "${_src_dir}"
    COMMENT "${_comment}"
    COMMAND_EXPAND_LISTS
    VERBATIM)
endfunction()

#[=[
_cudaq_realtime_add_fatbin_python(<target> <source.py> <output> <arch>...)

A file of Python handlers (skbuild_cudaq.numba): ``python -m skbuild_cudaq.numba``
compiles each handler with numba-cuda to LTO-IR for every <arch> (one fatbin container
per handler) and writes the record and a depfile (the file and the project's modules
it imports); no nvcc, no NVRTC. Run by the steps runner with SKBUILD_CUDAQ_PYTHON (the
build's Python, where the backend put numba-cuda and NVVM).
#]=]
function(_cudaq_realtime_add_fatbin_python target source output)
  get_filename_component(_name "${source}" NAME)
  set(_archs)
  foreach(_arch IN LISTS ARGN)
    list(APPEND _archs --arch "${_arch}")
  endforeach()
  _cudaq_realtime_step(_compile numba "${SKBUILD_CUDAQ_PYTHON}" -m skbuild_cudaq.numba
    "${source}" ${_archs} -o "${output}" --record "${output}.json" --depfile "${output}.d"
    --project-dir "${CMAKE_SOURCE_DIR}" --target "${target}")
  _cudaq_realtime_add_steps(${target} "${source}" "${output}" "${SKBUILD_CUDAQ_PYTHON}"
    "skbuild-cudaq: numba-cuda (LTO-IR ${ARGN}) ${_name} for ${target}" "${_compile}")
endfunction()

#[=[
_cudaq_realtime_embed_language(<caller> <out-ext>)

The generated embed file is C when the project enabled C, else C++.
#]=]
function(_cudaq_realtime_embed_language caller out_ext)
  get_property(_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
  if("C" IN_LIST _langs)
    set(${out_ext} "c" PARENT_SCOPE)
  elseif("CXX" IN_LIST _langs)
    set(${out_ext} "cpp" PARENT_SCOPE)
  else()
    _cudaq_realtime_where(${caller} _where)
    message(FATAL_ERROR
      "${_where}: the project enables neither C nor CXX; skbuild-cudaq embeds the device code with "
      "a small generated C/C++ file. Add C or CXX to project(... LANGUAGES ...).")
  endif()
endfunction()

#[=[
_cudaq_realtime_write_embed_source(<source-out> <fatbins> <sources>)

Writes (only when its content changes) one C/C++ file whose top-level asm
places each of <fatbins> (compiled from the same item of <sources>) in
__nv_relfatbin, in order: flags "aR" (allocated, and retained against
--gc-sections), 8-byte aligned, absolute .incbin path (host -flto assembles in
another directory). A C file, not a raw .s, so that the object carries
.note.GNU-stack and the module never asks for an executable stack. One file
for all the kernels of a call: one host compile, the same sections as one file
per kernel (each block starts and ends 8-byte aligned).
#]=]
function(_cudaq_realtime_write_embed_source source_out fatbins sources)
  set(_content "/* Generated by skbuild-cudaq: do not edit.
 * Embeds LTO-IR fatbins into __nv_relfatbin, next to the fatbins nvcc emits for -rdc sources.
 * \"aR\": allocated and retained against --gc-sections. No host code registers them. */
")
  foreach(fatbin what IN ZIP_LISTS fatbins sources)
    string(REPLACE "*/" "* /" what "${what}")  # a directory "x*" must not end the comment
    string(APPEND _content "
/* The LTO-IR fatbin of ${what} */
__asm__(
    \".section __nv_relfatbin,\\\"aR\\\"\\n\"
    \".balign 8\\n\"
    \".incbin \\\"${fatbin}\\\"\\n\"
    \".balign 8\\n\"
    \".previous\\n\");
")
    if(SKBUILD_CUDAQ_PYTHON)
      # The record (fatbin.json) that names what the fatbin holds: section __cudaq_rt_info,
      # framed by "CQRTINFO", version 1 and the length the assembler computes.
      string(APPEND _content "
/* The record naming the kernels and handlers of this fatbin (skbuild_cudaq.build._device_info). */
__asm__(
    \".section __cudaq_rt_info,\\\"aR\\\"\\n\"
    \".balign 8\\n\"
    \".ascii \\\"CQRTINFO\\\"\\n\"
    \".long 1\\n\"
    \".long 2f - 1f\\n\"
    \"1:\\n\"
    \".incbin \\\"${fatbin}.json\\\"\\n\"
    \"2:\\n\"
    \".balign 8\\n\"
    \".previous\\n\");
")
    endif()
  endforeach()
  file(CONFIGURE OUTPUT "${source_out}" CONTENT "${_content}")
endfunction()

#[=[
_cudaq_realtime_embed_fatbins(<caller> <target> <sources> <archs>)

Per source: a fatbin custom command; one embed file for all of them with
OBJECT_DEPENDS on them, attached to <target>; the custom commands hang off
<target>_cudaq_device_code (in the calling directory) so that they run
wherever <target> was created. The output directory is made here, once.
#]=]
function(_cudaq_realtime_embed_fatbins caller target sources archs)
  _cudaq_realtime_embed_language(${caller} _ext)
  set(_dir "${CMAKE_CURRENT_BINARY_DIR}/cudaq_realtime/${target}")
  file(MAKE_DIRECTORY "${_dir}")
  set(_fatbins)
  set(_embed_depends)
  foreach(_src IN LISTS sources)
    get_filename_component(_stem "${_src}" NAME_WE)
    string(MD5 _hash "${_src}")
    string(SUBSTRING "${_hash}" 0 8 _hash)
    set(_fatbin "${_dir}/${_stem}-${_hash}.fatbin")
    _cudaq_realtime_add_fatbin(${target} "${_src}" "${_fatbin}" ${archs})
    list(APPEND _fatbins "${_fatbin}")
    list(APPEND _embed_depends "${_fatbin}")
    if(SKBUILD_CUDAQ_PYTHON)
      list(APPEND _embed_depends "${_fatbin}.json")
    endif()
  endforeach()
  string(MD5 _hash "${sources}")
  string(SUBSTRING "${_hash}" 0 8 _hash)
  set(_embed "${_dir}/embed-${_hash}.${_ext}")
  _cudaq_realtime_write_embed_source("${_embed}" "${_fatbins}" "${sources}")
  target_sources(${target} PRIVATE "${_embed}")
  set_source_files_properties("${_embed}" TARGET_DIRECTORY ${target}
                              PROPERTIES OBJECT_DEPENDS "${_embed_depends}")
  set(_custom "${target}_cudaq_device_code")
  if(TARGET ${_custom})
    # A second call for the same target: one more custom target.
    set(_custom "${_custom}_${_hash}")
  endif()
  add_custom_target(${_custom} DEPENDS ${_fatbins})
  add_dependencies(${target} ${_custom})
  set_property(TARGET ${target} APPEND PROPERTY SKBUILD_CUDAQ_FATBINS ${_fatbins})
endfunction()

#[=[
_cudaq_realtime_note_device_sources(<target> <sources> <archs>)

Remembers device sources of <target> (any of the public functions) for its
handler switch, and the first time defers _cudaq_realtime_handler_switch(<target>)
to the end of the top-level directory, after every call (and after the
[tool.cudaq.dispatch-kernels] entries) has added its sources.
#]=]
function(_cudaq_realtime_note_device_sources target sources archs)
  set_property(TARGET ${target} APPEND PROPERTY SKBUILD_CUDAQ_SWITCH_SOURCES ${sources})
  set_property(TARGET ${target} APPEND PROPERTY SKBUILD_CUDAQ_SWITCH_ARCHITECTURES ${archs})
  get_target_property(_scheduled ${target} SKBUILD_CUDAQ_SWITCH_SCHEDULED)
  if(NOT _scheduled)
    set_property(TARGET ${target} PROPERTY SKBUILD_CUDAQ_SWITCH_SCHEDULED ON)
    # A deferred call's arguments are expanded when it runs: pass the name itself.
    cmake_language(EVAL CODE "cmake_language(DEFER DIRECTORY [[${CMAKE_SOURCE_DIR}]] \
                   CALL _cudaq_realtime_handler_switch [[${target}]])")
  endif()
endfunction()

#[=[
_cudaq_realtime_handler_switch(<target>)

Deferred (see _cudaq_realtime_note_device_sources). Writes and side-compiles the
target's *handler switch*: a definition of the device hooks cudaq_dev_call_handler
and cudaq_dev_call_launch_handler, each of which compares the handler address a
dispatch kernel is about to call with each handler of its shape (thread-shaped,
launch-wide) the target's device sources export and calls a match directly --
LTO inlines it into the kernel -- and calls any other address through the
pointer. Without a switch the run time's default forms (the pointer) are
linked: same results, a slower call. The source is written by
skbuild_cudaq.build._handler_switch (one generator for every front door) with
SKBUILD_CUDAQ_PYTHON; without a Python, or with SKBUILD_CUDAQ_HANDLER_SWITCH set
OFF, there is no switch. The sources become configure dependencies, so that an
added export re-runs CMake. Compiled for the lowest architecture of the
target's device sources (LTO-IR links for that GPU and every newer one).
#]=]
function(_cudaq_realtime_handler_switch target)
  if(DEFINED SKBUILD_CUDAQ_HANDLER_SWITCH AND NOT SKBUILD_CUDAQ_HANDLER_SWITCH)
    return()
  endif()
  _cudaq_realtime_find_python()
  if(NOT SKBUILD_CUDAQ_PYTHON)
    return()
  endif()
  get_target_property(_sources ${target} SKBUILD_CUDAQ_SWITCH_SOURCES)
  get_target_property(_archs ${target} SKBUILD_CUDAQ_SWITCH_ARCHITECTURES)
  list(REMOVE_DUPLICATES _sources)
  set(_cuda_sources ${_sources})
  list(FILTER _cuda_sources EXCLUDE REGEX "[.]py$")
  if(NOT _cuda_sources)
    return()  # Python handlers only: no device compiler for a switch; the pointer calls them
  endif()
  set_property(DIRECTORY "${CMAKE_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_sources})
  set(_dir "${CMAKE_CURRENT_BINARY_DIR}/cudaq_realtime/${target}")
  set(_switch "${_dir}/handler_switch.cu")
  execute_process(
    COMMAND "${SKBUILD_CUDAQ_PYTHON}" "${_SKBUILD_CUDAQ_CMAKE_DIR}/_run_handler_switch.py"
            --target "${target}" --project-dir "${CMAKE_SOURCE_DIR}" -o "${_switch}" ${_sources}
    RESULT_VARIABLE _rc
    ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR
      "skbuild-cudaq: writing the handler switch of ${target} failed (${SKBUILD_CUDAQ_PYTHON}):\n"
      "${_err}")
  endif()
  # one line a direct call (tests/test_handler_switch.py keeps this in step with the generator)
  file(STRINGS "${_switch}" _calls REGEX "^    return cudaq_detail_call_direct\\(cudaq_handler_")
  list(LENGTH _calls _count)
  if(_count EQUAL 0)
    return()  # nothing to call directly: the default form does the same
  endif()
  list(SORT _archs COMPARE NATURAL)
  list(GET _archs 0 _arch)
  set(_caller "skbuild-cudaq (the handler switch of ${target})")
  _cudaq_realtime_find_device_compiler("${_caller}")
  _cudaq_realtime_embed_fatbins("${_caller}" ${target} "${_switch}" "${_arch}")
  message(STATUS "skbuild-cudaq: ${target}: handler switch over ${_count} exported handlers")
endfunction()

#[=[
_cudaq_realtime_check_once(<caller> <target> <file>...)

Each side-compiled source once per target: a second call (a CMake one-liner and a
[tool.cudaq.dispatch-kernels] entry, two one-liners, or one file twice in a call) would
add a second custom command for the same fatbin, which CMake reports only as "Files to
be generated by multiple different commands". Remembers, per target, each source and
who added it (target properties SKBUILD_CUDAQ_SIDE_SOURCES and _SIDE_CALLERS).
#]=]
function(_cudaq_realtime_check_once caller target)
  _cudaq_realtime_where("${caller}" _where)
  string(REGEX REPLACE "^skbuild-cudaq: " "" _who "${_where}")
  get_target_property(_known ${target} SKBUILD_CUDAQ_SIDE_SOURCES)
  get_target_property(_callers ${target} SKBUILD_CUDAQ_SIDE_CALLERS)
  if(NOT _known)
    set(_known)
    set(_callers)
  endif()
  foreach(_file IN LISTS ARGN)
    list(FIND _known "${_file}" _index)
    if(_index GREATER_EQUAL 0)
      list(GET _callers ${_index} _first)
      set(_shown "${_file}")
      cmake_path(IS_PREFIX CMAKE_SOURCE_DIR "${_file}" NORMALIZE _in_project)
      if(_in_project)
        file(RELATIVE_PATH _shown "${CMAKE_SOURCE_DIR}" "${_file}")
      endif()
      message(FATAL_ERROR
        "${_where}: source file \"${_shown}\" is already device code of target \"${target}\" "
        "(added by ${_first}); each source is compiled and embedded once per target. Remove "
        "one of the two: a file declared in [tool.cudaq.dispatch-kernels] needs no CMake call.")
    endif()
    list(APPEND _known "${_file}")
    list(APPEND _callers "${_who}")
  endforeach()
  set_property(TARGET ${target} PROPERTY SKBUILD_CUDAQ_SIDE_SOURCES "${_known}")
  set_property(TARGET ${target} PROPERTY SKBUILD_CUDAQ_SIDE_CALLERS "${_callers}")
endfunction()

#[=[
_cudaq_realtime_check_keywords(<caller> <missing> <sources> <archs>)

What cmake_parse_arguments left of ``<target> <file.cu>... [ARCHITECTURES <arch>...]``
(<missing>: its KEYWORDS_MISSING_VALUES, <sources>: its UNPARSED_ARGUMENTS, <archs>:
ARCHITECTURES' values, each a ;-list) checked for the slips that would otherwise
read as a missing file or a bad architecture:

- ``ARCHITECTURES`` with no value (``ARCHITECTURES ${UNSET_VARIABLE}``) would build
  for the default without a word: stop, naming the default;
- an unknown or misspelt keyword (a "source" that is no existing file and is written
  in capitals, or is close to ``ARCHITECTURES``): stop, with "did you mean" when close;
- a source after ``ARCHITECTURES`` (an architecture ending in a file extension): stop,
  saying that sources come first.
#]=]
function(_cudaq_realtime_check_keywords caller missing sources archs)
  _cudaq_realtime_where(${caller} _where)
  set(_usage "<target> <file.cu>... [ARCHITECTURES <arch>...]")
  if("ARCHITECTURES" IN_LIST missing)
    get_property(_default GLOBAL PROPERTY _SKBUILD_CUDAQ_ARCH_default)
    message(FATAL_ERROR
      "${_where}: ARCHITECTURES is given no architecture. Name at least one (80, 90, ...), or "
      "leave the keyword out for the default (${_default}).")
  endif()
  foreach(_arg IN LISTS sources)
    if(NOT _arg MATCHES "^[A-Za-z_]+$" OR EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/${_arg}")
      continue()
    endif()
    _cudaq_realtime_edit_distance("${_arg}" "ARCHITECTURES" _d)
    if(_d LESS_EQUAL 3)
      message(FATAL_ERROR
        "${_where}: unknown keyword \"${_arg}\"; did you mean ARCHITECTURES? The command "
        "takes ${_usage}.")
    elseif(_arg MATCHES "^[A-Z][A-Z_]*$")
      message(FATAL_ERROR
        "${_where}: unknown keyword \"${_arg}\"; the only keyword is ARCHITECTURES. The "
        "command takes ${_usage}.")
    endif()
  endforeach()
  foreach(_arch IN LISTS archs)
    if(_arch MATCHES "[.][A-Za-z]+$")
      message(FATAL_ERROR
        "${_where}: \"${_arch}\" follows ARCHITECTURES, which takes architectures only; "
        "sources come first: ${_usage}.")
    endif()
  endforeach()
endfunction()

#[=[
_cudaq_realtime_add_device_sources_impl(<caller> <target> <file.cu>... [ARCHITECTURES <arch>...])

The work of cudaq_realtime_add_device_sources for every public function that
side-compiles (<caller> names that function in messages): checks, then one
fatbin custom command per source and their embed file.
#]=]
function(_cudaq_realtime_add_device_sources_impl caller target)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "" "" "ARCHITECTURES")
  _cudaq_realtime_check_target("${caller}" "${target}" target)
  _cudaq_realtime_check_keywords("${caller}" "${ARG_KEYWORDS_MISSING_VALUES}"
    "${ARG_UNPARSED_ARGUMENTS}" "${ARG_ARCHITECTURES}")
  _cudaq_realtime_check_architectures("${caller}" _archs ${ARG_ARCHITECTURES})
  _cudaq_realtime_resolve_sources("${caller}" _sources ${ARG_UNPARSED_ARGUMENTS})
  _cudaq_realtime_check_once("${caller}" ${target} ${_sources})
  set(_cuda_sources ${_sources})
  list(FILTER _cuda_sources EXCLUDE REGEX "[.]py$")
  if(_cuda_sources)
    _cudaq_realtime_find_device_compiler("${caller}")  # Python handlers need none
  endif()
  _cudaq_realtime_find_python()
  if(NOT SKBUILD_CUDAQ_PYTHON AND NOT "${_cuda_sources}" STREQUAL "${_sources}")
    _cudaq_realtime_where(${caller} _where)
    message(FATAL_ERROR "${_where}: .py sources (Python handlers) are compiled by numba-cuda "
      "in Python, and no Python was found: set Python_EXECUTABLE or SKBUILD_CUDAQ_PYTHON.")
  endif()
  _cudaq_realtime_embed_fatbins("${caller}" ${target} "${_sources}" "${_archs}")
  _cudaq_realtime_note_device_sources(${target} "${_sources}" "${_archs}")
endfunction()

# The public side-compiling functions check every argument as the user wrote it (before a ";"
# inside one splits it), then hand them all to the implementation, which parses them.
function(cudaq_realtime_add_device_sources target)
  set(_caller "cudaq_realtime_add_device_sources(${target})")
  _cudaq_realtime_check_arguments("${_caller}" ${ARGC})
  _cudaq_realtime_add_device_sources_impl("${_caller}" ${ARGV})
endfunction()

function(cudaq_realtime_add_dispatch_kernel target)
  set(_caller "cudaq_realtime_add_dispatch_kernel(${target})")
  _cudaq_realtime_check_arguments("${_caller}" ${ARGC})
  _cudaq_realtime_add_device_sources_impl("${_caller}" ${ARGV})
endfunction()

function(cudaq_realtime_target_skip_device_link target)
  set(_caller "cudaq_realtime_target_skip_device_link(${target})")
  if(ARGN)
    _cudaq_realtime_where("${_caller}" _where)
    list(JOIN ARGN " " _extra)
    message(FATAL_ERROR
      "${_where}: takes one argument, the target; remove \"${_extra}\" (one call per target).")
  endif()
  _cudaq_realtime_check_target("${_caller}" "${target}" target)
  get_target_property(_type ${target} TYPE)
  if(_type STREQUAL "OBJECT_LIBRARY")
    _cudaq_realtime_where("${_caller}" _where)
    message(FATAL_ERROR "${_where}: call this on the MODULE/SHARED/EXECUTABLE target that links.")
  endif()
  get_target_property(_done ${target} SKBUILD_CUDAQ_SKIP_DEVICE_LINK)
  if(_done)
    return()
  endif()
  get_property(_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
  if("C" IN_LIST _langs)
    set(_cc "${CMAKE_C_COMPILER}")
  elseif("CXX" IN_LIST _langs)
    set(_cc "${CMAKE_CXX_COMPILER}")
  else()
    set(_cc "${SKBUILD_CUDAQ_NVCC}")
  endif()
  set(_dir "${CMAKE_CURRENT_BINARY_DIR}/cudaq_realtime/${target}")
  # The objects differ per configuration under a multi-configuration generator.
  _cudaq_realtime_per_config(_config)
  set(_list "${_dir}/objects${_config}.txt")
  set(_obj "${_dir}/${target}_cudaq_no_device_link${_config}.o")
  file(GENERATE OUTPUT "${_list}" CONTENT "$<JOIN:$<TARGET_OBJECTS:${target}>,\n>\n")
  # The records naming the kernels and handlers of the target's nvcc objects (one per object
  # with device code), written by Python at link time and embedded by the same object.
  _cudaq_realtime_find_python()
  set(_info_args "")
  if(SKBUILD_CUDAQ_PYTHON)
    set(_args_file "${_dir}/device_info_args.txt")
    set(_srcs "$<TARGET_PROPERTY:${target},SKBUILD_CUDAQ_HANDLER_SOURCES>")
    set(_archs "$<TARGET_PROPERTY:${target},SKBUILD_CUDAQ_HANDLER_ARCHITECTURES>")
    set(_nvcc_for_info "${CMAKE_CUDA_COMPILER}")
    if(NOT _nvcc_for_info)
      set(_nvcc_for_info "${SKBUILD_CUDAQ_NVCC}")
    endif()
    file(GENERATE OUTPUT "${_args_file}" CONTENT
"--sources\n$<JOIN:${_srcs},\n>\n--project-dir\n${CMAKE_SOURCE_DIR}\n--nvcc=${_nvcc_for_info}\n\
--arch\n$<IF:$<BOOL:${_archs}>,$<JOIN:${_archs},\n>,${SKBUILD_CUDAQ_DEFAULT_ARCHITECTURES}>\n")
    set(_info_args "-DPYTHON=${SKBUILD_CUDAQ_PYTHON}" "-DINFO_ARGS=${_args_file}"
        "-DINFO_SCRIPT=${_SKBUILD_CUDAQ_CMAKE_DIR}/_run_device_info.py")
  endif()
  add_custom_command(TARGET ${target} PRE_LINK
    COMMAND "${CMAKE_COMMAND}" "-DOBJECT_LIST=${_list}" "-DOUTPUT=${_obj}" "-DCOMPILER=${_cc}"
            ${_info_args}
            -P "${_SKBUILD_CUDAQ_CMAKE_DIR}/skbuild_cudaq_no_device_link.cmake"
    VERBATIM)
  target_link_options(${target} PRIVATE "${_obj}")
  set_property(TARGET ${target} PROPERTY SKBUILD_CUDAQ_SKIP_DEVICE_LINK ON)
endfunction()

function(cudaq_realtime_add_handlers target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "ARCHITECTURES")
  set(_caller "cudaq_realtime_add_handlers(${target})")
  _cudaq_realtime_check_arguments("${_caller}" ${ARGC})
  _cudaq_realtime_check_target("${_caller}" "${target}" target)
  _cudaq_realtime_check_keywords("${_caller}" "${ARG_KEYWORDS_MISSING_VALUES}"
    "${ARG_UNPARSED_ARGUMENTS}" "${ARG_ARCHITECTURES}")
  get_property(_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "CUDA" IN_LIST _langs AND NOT SKBUILD_CUDAQ_COMPILER STREQUAL "nvcc")
    # No CUDA language (no nvcc): side-compile the handlers with the device compiler.
    _cudaq_realtime_find_device_compiler("${_caller}")
    if(SKBUILD_CUDAQ_DEVICE_COMPILER STREQUAL "nvrtc")
      _cudaq_realtime_add_device_sources_impl("${_caller}" ${target} ${ARGN})
      return()
    endif()
  endif()
  if(NOT "CUDA" IN_LIST _langs)
    _cudaq_realtime_where("${_caller}" _where)
    message(FATAL_ERROR
      "${_where}: the project does not enable the CUDA language. Add CUDA to "
      "project(... LANGUAGES ...), or side-compile the handlers with "
      "cudaq_realtime_add_device_sources(${target} <file.cu>...), which needs no CUDA language.")
  endif()
  _cudaq_realtime_check_architectures("${_caller}" _archs ${ARG_ARCHITECTURES})
  _cudaq_realtime_resolve_sources("${_caller}" _sources ${ARG_UNPARSED_ARGUMENTS})
  # Other CUDA sources of the target decide whether CUDA_ARCHITECTURES stays.
  get_target_property(_existing ${target} SOURCES)
  set(_other_cuda FALSE)
  foreach(_s IN LISTS _existing)
    get_filename_component(_abs "${_s}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(_s MATCHES "\\.cu$" AND NOT _abs IN_LIST _sources)
      set(_other_cuda TRUE)
    endif()
  endforeach()
  if(NOT _other_cuda)
    set_property(TARGET ${target} PROPERTY CUDA_ARCHITECTURES OFF)
  endif()
  set(_options -rdc=true)
  foreach(_arch IN LISTS _archs)
    list(APPEND _options "--generate-code=arch=compute_${_arch},code=[lto_${_arch}]")
  endforeach()
  target_sources(${target} PRIVATE ${_sources})
  set_property(TARGET ${target} APPEND PROPERTY SKBUILD_CUDAQ_HANDLER_SOURCES ${_sources})
  set_property(TARGET ${target} APPEND PROPERTY SKBUILD_CUDAQ_HANDLER_ARCHITECTURES ${_archs})
  _cudaq_realtime_note_device_sources(${target} "${_sources}" "${_archs}")
  set_source_files_properties(${_sources} TARGET_DIRECTORY ${target} PROPERTIES
    LANGUAGE CUDA
    COMPILE_OPTIONS "${_options}"
    INCLUDE_DIRECTORIES "${SKBUILD_CUDAQ_INCLUDE_DIR}")
  cudaq_realtime_target_skip_device_link(${target})
endfunction()

#[=[
_cudaq_realtime_edit_distance(<a> <b> <out-var>)

Levenshtein distance between <a> and <b>, ignoring case.
#]=]
function(_cudaq_realtime_edit_distance a b out_var)
  string(TOLOWER "${a}" a)
  string(TOLOWER "${b}" b)
  string(LENGTH "${a}" _la)
  string(LENGTH "${b}" _lb)
  if(_la EQUAL 0 OR _lb EQUAL 0)
    math(EXPR _d "${_la} + ${_lb}")
    set(${out_var} ${_d} PARENT_SCOPE)
    return()
  endif()
  set(_prev)
  foreach(_j RANGE ${_lb})
    list(APPEND _prev ${_j})
  endforeach()
  foreach(_i RANGE 1 ${_la})
    math(EXPR _i0 "${_i} - 1")
    string(SUBSTRING "${a}" ${_i0} 1 _ca)
    set(_cur ${_i})
    foreach(_j RANGE 1 ${_lb})
      math(EXPR _j0 "${_j} - 1")
      string(SUBSTRING "${b}" ${_j0} 1 _cb)
      list(GET _prev ${_j0} _diag)
      list(GET _prev ${_j} _up)
      list(GET _cur ${_j0} _left)
      if(_ca STREQUAL _cb)
        set(_best ${_diag})
      else()
        math(EXPR _best "${_diag} + 1")
      endif()
      foreach(_other IN ITEMS ${_up} ${_left})
        math(EXPR _other "${_other} + 1")
        if(_other LESS _best)
          set(_best ${_other})
        endif()
      endforeach()
      list(APPEND _cur ${_best})
    endforeach()
    set(_prev ${_cur})
  endforeach()
  list(GET _prev ${_lb} _d)
  set(${out_var} ${_d} PARENT_SCOPE)
endfunction()

#[=[
_cudaq_realtime_did_you_mean(<name> <out-var>)

What to append to "no target named <name>": `` Did you mean "<target>"?`` for the
project's target closest to <name> (edit distance ignoring case at most a third
of the name's length, and at least 2), else `` Targets of this project: a, b.``
listing the targets device code can go into (MODULE, SHARED, EXECUTABLE or OBJECT
libraries created so far, in every directory), else nothing.
#]=]
function(_cudaq_realtime_did_you_mean name out_var)
  set(_targets)
  set(_dirs "${CMAKE_SOURCE_DIR}")
  while(_dirs)
    list(POP_FRONT _dirs _dir)
    get_property(_here DIRECTORY "${_dir}" PROPERTY BUILDSYSTEM_TARGETS)
    get_property(_sub DIRECTORY "${_dir}" PROPERTY SUBDIRECTORIES)
    foreach(_t IN LISTS _here)
      get_target_property(_type "${_t}" TYPE)
      if(_type MATCHES "^(MODULE_LIBRARY|SHARED_LIBRARY|EXECUTABLE|OBJECT_LIBRARY)$")
        list(APPEND _targets "${_t}")
      endif()
    endforeach()
    list(APPEND _dirs ${_sub})
  endwhile()
  if(NOT _targets)
    set(${out_var} "" PARENT_SCOPE)
    return()
  endif()
  string(LENGTH "${name}" _len)
  math(EXPR _limit "${_len} / 3")
  if(_limit LESS 2)
    set(_limit 2)
  endif()
  set(_best "")
  set(_best_d "")
  foreach(_t IN LISTS _targets)
    _cudaq_realtime_edit_distance("${name}" "${_t}" _d)
    if(_d LESS_EQUAL _limit AND (_best_d STREQUAL "" OR _d LESS _best_d))
      set(_best "${_t}")
      set(_best_d ${_d})
    endif()
  endforeach()
  if(NOT _best STREQUAL "")
    set(${out_var} " Did you mean \"${_best}\"?" PARENT_SCOPE)
  else()
    list(JOIN _targets ", " _all)
    set(${out_var} " Targets of this project: ${_all}." PARENT_SCOPE)
  endif()
endfunction()

# [tool.cudaq] under another backend stops here; no device code added by the end warns.
include("${CMAKE_CURRENT_LIST_DIR}/skbuild_cudaq_guards.cmake")

cmake_policy(POP)
