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
to be enabled, and nothing needs a GPU.

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
  embeds it into ``<target>``. The file is *not* added to the target's
  sources. ``<target>`` is a ``MODULE``, ``SHARED``, ``EXECUTABLE`` or
  ``OBJECT`` library target created before the call. ``ARCHITECTURES``
  defaults to ``80``: LTO-IR built for one architecture links for that GPU
  and every newer one; each must be a number ``>= 80`` (optionally with an
  ``a``/``f`` suffix, e.g. ``90a``).

  The fatbin is rebuilt when the ``.cu`` file or any header it includes
  changes (nvcc ``-MD`` depfile), and only then; the object that embeds it is
  rebuilt when the fatbin changes (``OBJECT_DEPENDS``). nvcc runs in the
  source's directory (it records its working directory in the LTO-IR), so the
  fatbin does not depend on where the build directory is.

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
  The nvcc used for device code. Found from ``CMAKE_CUDA_COMPILER``, the
  ``CUDACXX`` environment variable, ``PATH``, ``SKBUILD_CUDAQ_NVCC_HINT`` (set
  by the ``skbuild_cudaq.build`` backend when nvcc comes from the
  ``nvidia-cuda-nvcc`` wheel), and finally by asking ``skbuild_cudaq`` in the
  build's Python (``Python_EXECUTABLE``), which finds that wheel too.

``SKBUILD_CUDAQ_INCLUDE_DIR``
  The device headers (``cudaq/realtime/unified_dispatch_device.cuh``).

``SKBUILD_CUDAQ_COMPILER``
  The device compiler of dispatch kernels and side-compiled handlers: ``auto``
  (default: nvcc where found, else NVRTC from the build's Python environment),
  ``nvcc`` or ``nvrtc`` (``[tool.cudaq] compiler``). With NVRTC, the fatbins
  are made by ``python -m skbuild_cudaq nvrtc`` (the ``nvidia-cuda-nvrtc`` or
  ``nvidia-cuda-nvrtc-cu12`` wheel; ``SKBUILD_CUDAQ_NVRTC_MAJOR`` picks a major
  when both are installed), and :command:`cudaq_realtime_add_handlers`
  side-compiles when the CUDA language is off. The result is in
  ``SKBUILD_CUDAQ_DEVICE_COMPILER``; see ``skbuild_cudaq_nvrtc.cmake``.
#]=======================================================================]

include_guard(GLOBAL)

if(CMAKE_VERSION VERSION_LESS 3.20)
  message(FATAL_ERROR
    "skbuild_cudaq needs CMake >= 3.20 (found ${CMAKE_VERSION}). "
    "Set `cmake.version = \">=3.25\"` in [tool.scikit-build] of pyproject.toml, "
    "or cmake_minimum_required(VERSION 3.25) in CMakeLists.txt.")
endif()

cmake_policy(PUSH)
# Functions record the policies in effect where they are defined.
cmake_policy(VERSION 3.20...4.0)
include("${CMAKE_CURRENT_LIST_DIR}/skbuild_cudaq_nvrtc.cmake")

get_filename_component(SKBUILD_CUDAQ_INCLUDE_DIR "${CMAKE_CURRENT_LIST_DIR}/../include" ABSOLUTE)
set(SKBUILD_CUDAQ_INCLUDE_DIR "${SKBUILD_CUDAQ_INCLUDE_DIR}"
    CACHE INTERNAL "skbuild-cudaq device headers")
set(_SKBUILD_CUDAQ_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}"
    CACHE INTERNAL "skbuild-cudaq CMake package directory")
set(SKBUILD_CUDAQ_DEFAULT_ARCHITECTURES 80)

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
_cudaq_realtime_find_nvcc(<caller>)

Sets the cache variable SKBUILD_CUDAQ_NVCC, or stops with what to install.
#]=]
function(_cudaq_realtime_find_nvcc caller)
  if(SKBUILD_CUDAQ_NVCC AND EXISTS "${SKBUILD_CUDAQ_NVCC}")
    return()
  endif()
  unset(_nvcc)
  if(CMAKE_CUDA_COMPILER AND EXISTS "${CMAKE_CUDA_COMPILER}")
    set(_nvcc "${CMAKE_CUDA_COMPILER}")
  elseif(DEFINED ENV{CUDACXX} AND EXISTS "$ENV{CUDACXX}")
    set(_nvcc "$ENV{CUDACXX}")
  else()
    find_program(_SKBUILD_CUDAQ_NVCC_ON_PATH NAMES nvcc NO_CACHE)
    if(_SKBUILD_CUDAQ_NVCC_ON_PATH)
      set(_nvcc "${_SKBUILD_CUDAQ_NVCC_ON_PATH}")
    elseif(SKBUILD_CUDAQ_NVCC_HINT AND EXISTS "${SKBUILD_CUDAQ_NVCC_HINT}")
      set(_nvcc "${SKBUILD_CUDAQ_NVCC_HINT}")
    else()
      # The nvidia-cuda-nvcc wheel of the build's Python (plain scikit-build-core).
      foreach(_py IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
        if(_py AND EXISTS "${_py}")
          execute_process(
            COMMAND "${_py}" -c
                    "from skbuild_cudaq._toolchain import nvcc_from_wheel as f; p = f(); print(p or '')"
            OUTPUT_VARIABLE _from_wheel OUTPUT_STRIP_TRAILING_WHITESPACE
            ERROR_QUIET RESULT_VARIABLE _rc)
          if(_rc EQUAL 0 AND _from_wheel AND EXISTS "${_from_wheel}")
            set(_nvcc "${_from_wheel}")
            break()
          endif()
        endif()
      endforeach()
    endif()
  endif()
  if(NOT DEFINED _nvcc AND _SKBUILD_CUDAQ_NVCC_OPTIONAL)
    return()  # compiler = auto: NVRTC next (skbuild_cudaq_nvrtc.cmake)
  endif()
  if(NOT DEFINED _nvcc)
    _cudaq_realtime_where(${caller} _where)
    message(FATAL_ERROR
      "${_where}: nvcc not found: it compiles the dispatch kernels to LTO-IR. "
      "Set CMAKE_CUDA_COMPILER (or the CUDACXX environment variable) to the nvcc of a "
      "CUDA toolkit, put nvcc on PATH, or `pip install nvidia-cuda-nvcc` "
      "(add it to build-system.requires).")
  endif()
  set(SKBUILD_CUDAQ_NVCC "${_nvcc}" CACHE FILEPATH "nvcc used by skbuild-cudaq for device code" FORCE)
  message(STATUS "skbuild-cudaq: nvcc: ${_nvcc}")
endfunction()

#[=[
_cudaq_realtime_check_target(<caller> <target>)

The target exists and is a kind whose link keeps embedded objects.
#]=]
function(_cudaq_realtime_check_target caller target)
  _cudaq_realtime_where(${caller} _where)
  if(NOT TARGET "${target}")
    message(FATAL_ERROR
      "${_where}: no CMake target named \"${target}\". Create the target (add_library, "
      "python_add_library, nanobind_add_module, ...) before this call, or correct the name.")
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
endfunction()

#[=[
_cudaq_realtime_check_architectures(<caller> <out-var> <arch>...)

Validates LTO architectures (numbers >= 80, optional a/f suffix); default 80.
#]=]
function(_cudaq_realtime_check_architectures caller out_var)
  set(_archs ${ARGN})
  if(NOT _archs)
    set(_archs ${SKBUILD_CUDAQ_DEFAULT_ARCHITECTURES})
  endif()
  _cudaq_realtime_where(${caller} _where)
  foreach(_arch IN LISTS _archs)
    if(NOT _arch MATCHES "^([0-9]+)([af]?)$" OR CMAKE_MATCH_1 LESS 80)
      message(FATAL_ERROR
        "${_where}: architecture \"${_arch}\" is not supported: dispatch kernels are LTO-IR for "
        "sm_80 or newer. Use a number >= 80 such as 80 or 90 (LTO-IR built for one architecture "
        "links for that GPU and every newer one).")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _archs)
  set(${out_var} ${_archs} PARENT_SCOPE)
endfunction()

#[=[
_cudaq_realtime_resolve_sources(<caller> <out-var> <file>...)

Absolute, existing paths (relative ones are taken from the current source dir).
#]=]
function(_cudaq_realtime_resolve_sources caller out_var)
  _cudaq_realtime_where(${caller} _where)
  if(NOT ARGN)
    message(FATAL_ERROR "${_where}: no source files given; pass at least one .cu file.")
  endif()
  set(_out)
  foreach(_file IN LISTS ARGN)
    get_filename_component(_abs "${_file}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(NOT EXISTS "${_abs}" OR IS_DIRECTORY "${_abs}")
      message(FATAL_ERROR "${_where}: source file \"${_file}\" does not exist (looked for ${_abs}).")
    endif()
    if(_abs MATCHES "[\"\\\n]")
      message(FATAL_ERROR
        "${_where}: source path \"${_abs}\" contains a quote, backslash or newline; rename it.")
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
_cudaq_realtime_add_fatbin(<target> <source> <output> <arch>...)

The custom command: nvcc -fatbin -rdc=true, one code=lto_XX per arch, the
target's include directories / definitions / standard, -MD depfile.
#]=]
function(_cudaq_realtime_add_fatbin target source output)
  if(SKBUILD_CUDAQ_DEVICE_COMPILER STREQUAL "nvrtc")
    _cudaq_realtime_add_fatbin_nvrtc(${target} "${source}" "${output}" ${ARGN})
    return()
  endif()
  set(_gencode)
  foreach(_arch IN LISTS ARGN)
    list(APPEND _gencode "-gencode=arch=compute_${_arch},code=lto_${_arch}")
  endforeach()
  set(_inc "$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>")
  set(_defs "$<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>")
  _cudaq_realtime_std_genex(${target} _std)
  set(_host_compiler)
  if(CMAKE_CUDA_HOST_COMPILER)
    set(_host_compiler "--compiler-bindir=${CMAKE_CUDA_HOST_COMPILER}")
  endif()
  get_filename_component(_name "${source}" NAME)
  get_filename_component(_src_dir "${source}" DIRECTORY)
  get_filename_component(_dir "${output}" DIRECTORY)
  # nvcc does not escape spaces in the depfile's target: name it ourselves (make syntax).
  string(REPLACE " " "\\ " _dep_target "${output}")
  add_custom_command(
    OUTPUT "${output}"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${_dir}"
    COMMAND "${SKBUILD_CUDAQ_NVCC}" -fatbin -rdc=true ${_gencode} ${_host_compiler} "${_std}"
            "$<$<BOOL:${_inc}>:-I$<JOIN:${_inc},;-I>>"
            "$<$<BOOL:${_defs}>:-D$<JOIN:${_defs},;-D>>"
            "-I${SKBUILD_CUDAQ_INCLUDE_DIR}"
            -MD -MF "${output}.d" -MT "${_dep_target}" -o "${output}" "${source}"
    DEPENDS "${source}"
    DEPFILE "${output}.d"
    # nvcc records its working directory in the LTO-IR: run it next to the source so that
    # the fatbin does not depend on where the build directory is (reproducible wheels).
    WORKING_DIRECTORY "${_src_dir}"
    COMMENT "skbuild-cudaq: nvcc (LTO-IR ${ARGN}) ${_name} for ${target}"
    COMMAND_EXPAND_LISTS
    VERBATIM)
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
_cudaq_realtime_write_embed_source(<source-out> <fatbin> <what>)

Writes (only when its content changes) a C/C++ file whose top-level asm
places <fatbin> in __nv_relfatbin: flags "aR" (allocated, and retained
against --gc-sections), 8-byte aligned, absolute .incbin path (host -flto
assembles in another directory). A C file, not a raw .s, so that the object
carries .note.GNU-stack and the module never asks for an executable stack.
#]=]
function(_cudaq_realtime_write_embed_source source_out fatbin what)
  file(CONFIGURE OUTPUT "${source_out}" CONTENT [==[
/* Generated by skbuild-cudaq: do not edit.
 * Embeds the LTO-IR fatbin of @what@
 * into __nv_relfatbin, next to the fatbins nvcc emits for -rdc sources.
 * "aR": allocated and retained against --gc-sections. No host code registers it. */
__asm__(
    ".section __nv_relfatbin,\"aR\"\n"
    ".balign 8\n"
    ".incbin \"@fatbin@\"\n"
    ".balign 8\n"
    ".previous\n");
]==] @ONLY)
endfunction()

#[=[
_cudaq_realtime_embed_fatbins(<caller> <target> <sources> <archs>)

Per source: fatbin custom command, embed file with OBJECT_DEPENDS on it, both
attached to <target>; the custom commands hang off <target>_cudaq_device_code
(in the calling directory) so that they run wherever <target> was created.
#]=]
function(_cudaq_realtime_embed_fatbins caller target sources archs)
  _cudaq_realtime_embed_language(${caller} _ext)
  set(_dir "${CMAKE_CURRENT_BINARY_DIR}/cudaq_realtime/${target}")
  set(_fatbins)
  foreach(_src IN LISTS sources)
    get_filename_component(_stem "${_src}" NAME_WE)
    string(MD5 _hash "${_src}")
    string(SUBSTRING "${_hash}" 0 8 _hash)
    set(_fatbin "${_dir}/${_stem}-${_hash}.fatbin")
    set(_embed "${_dir}/${_stem}-${_hash}.embed.${_ext}")
    _cudaq_realtime_add_fatbin(${target} "${_src}" "${_fatbin}" ${archs})
    _cudaq_realtime_write_embed_source("${_embed}" "${_fatbin}" "${_src}")
    target_sources(${target} PRIVATE "${_embed}")
    set_source_files_properties("${_embed}" TARGET_DIRECTORY ${target}
                                PROPERTIES OBJECT_DEPENDS "${_fatbin}")
    list(APPEND _fatbins "${_fatbin}")
  endforeach()
  set(_custom "${target}_cudaq_device_code")
  if(TARGET ${_custom})
    # A second call for the same target: one more custom target.
    string(MD5 _hash "${sources}")
    string(SUBSTRING "${_hash}" 0 8 _hash)
    set(_custom "${_custom}_${_hash}")
  endif()
  add_custom_target(${_custom} DEPENDS ${_fatbins})
  add_dependencies(${target} ${_custom})
  set_property(TARGET ${target} APPEND PROPERTY SKBUILD_CUDAQ_FATBINS ${_fatbins})
endfunction()

function(cudaq_realtime_add_device_sources target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "ARCHITECTURES;_CALLER")
  if(ARG__CALLER)
    set(_caller "${ARG__CALLER}")
  else()
    set(_caller "cudaq_realtime_add_device_sources(${target})")
  endif()
  _cudaq_realtime_check_target("${_caller}" "${target}")
  _cudaq_realtime_check_architectures("${_caller}" _archs ${ARG_ARCHITECTURES})
  _cudaq_realtime_resolve_sources("${_caller}" _sources ${ARG_UNPARSED_ARGUMENTS})
  _cudaq_realtime_find_device_compiler("${_caller}")
  _cudaq_realtime_embed_fatbins("${_caller}" ${target} "${_sources}" "${_archs}")
endfunction()

function(cudaq_realtime_add_dispatch_kernel target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "ARCHITECTURES")
  cudaq_realtime_add_device_sources(${target} ${ARG_UNPARSED_ARGUMENTS}
    ARCHITECTURES ${ARG_ARCHITECTURES}
    _CALLER "cudaq_realtime_add_dispatch_kernel(${target})")
endfunction()

function(cudaq_realtime_target_skip_device_link target)
  set(_caller "cudaq_realtime_target_skip_device_link(${target})")
  _cudaq_realtime_check_target("${_caller}" "${target}")
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
  set(_list "${_dir}/objects.txt")
  set(_obj "${_dir}/${target}_cudaq_no_device_link.o")
  file(GENERATE OUTPUT "${_list}" CONTENT "$<JOIN:$<TARGET_OBJECTS:${target}>,\n>\n")
  add_custom_command(TARGET ${target} PRE_LINK
    COMMAND "${CMAKE_COMMAND}" "-DOBJECT_LIST=${_list}" "-DOUTPUT=${_obj}" "-DCOMPILER=${_cc}"
            -P "${_SKBUILD_CUDAQ_CMAKE_DIR}/skbuild_cudaq_no_device_link.cmake"
    VERBATIM)
  target_link_options(${target} PRIVATE "${_obj}")
  set_property(TARGET ${target} PROPERTY SKBUILD_CUDAQ_SKIP_DEVICE_LINK ON)
endfunction()

function(cudaq_realtime_add_handlers target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "ARCHITECTURES")
  set(_caller "cudaq_realtime_add_handlers(${target})")
  _cudaq_realtime_check_target("${_caller}" "${target}")
  get_property(_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "CUDA" IN_LIST _langs AND NOT SKBUILD_CUDAQ_COMPILER STREQUAL "nvcc")
    # No CUDA language (no nvcc): side-compile the handlers with the device compiler.
    _cudaq_realtime_find_device_compiler("${_caller}")
    if(SKBUILD_CUDAQ_DEVICE_COMPILER STREQUAL "nvrtc")
      cudaq_realtime_add_device_sources(${target} ${ARG_UNPARSED_ARGUMENTS}
        ARCHITECTURES ${ARG_ARCHITECTURES} _CALLER "${_caller}")
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
  set_source_files_properties(${_sources} TARGET_DIRECTORY ${target} PROPERTIES
    LANGUAGE CUDA
    COMPILE_OPTIONS "${_options}"
    INCLUDE_DIRECTORIES "${SKBUILD_CUDAQ_INCLUDE_DIR}")
  cudaq_realtime_target_skip_device_link(${target})
endfunction()

cmake_policy(POP)
