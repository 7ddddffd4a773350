# skbuild-cudaq's own device run time (included by the top-level CMakeLists.txt):
# each skbuild_cudaq/device/<name>.cu becomes the LTO-IR fatbin
# _device/cu<major>/<name>.fatbin (lto_80; the graph dispatch kernel in
# _device/cu<major>/graph/), one set per CUDA major, rebuilt when
# the source or a header it includes changes. Sets SKBUILD_CUDAQ_RUNTIME_FATBINS.
#
# LTO-IR links only with an nvJitLink of the same CUDA major, no older than the
# compiler, so the wheel carries one set per major and the run time picks the set
# of the installed nvJitLink. Compilers, in order:
#   * NVRTC of every CUDA major in the build environment (build-system.requires
#     pins nvidia-cuda-nvrtc-cu12 12.9 and nvidia-cuda-nvrtc 13.0: no toolkit
#     needed, and the IR is no newer than the oldest nvJitLink of [cu12]/[cu13]);
#     SKBUILD_CUDAQ_RUNTIME_MAJORS (e.g. "12;13") names the majors to require;
#   * else nvcc (CMAKE_CUDA_COMPILER, CUDACXX, PATH, the nvidia-cuda-nvcc wheel):
#     one set, for nvcc's major.
include_guard(GLOBAL)

# Without NVRTC, nvcc is found the way it is for users, in the one order of
# skbuild_cudaq/cmake/nvcc-search.txt, and every place tried is listed if there is none.
include("${PROJECT_SOURCE_DIR}/skbuild_cudaq/cmake/skbuild_cudaqConfig.cmake")

set(SKBUILD_CUDAQ_RUNTIME_MAJORS "" CACHE STRING
    "CUDA majors to build the device run time for with NVRTC (empty: every NVRTC found)")
set(_cudaq_runtime_sources unified_dispatch_kernel hook_defaults host_ring_bridge)
# Linked only into the module of a dispatcher that serves graph handlers (it calls
# the device runtime: cudaGraphLaunch), so it goes to _device/cu<major>/graph/,
# out of the set every lookup links.
set(_cudaq_runtime_graph_sources graph_dispatch_kernel)
set(SKBUILD_CUDAQ_RUNTIME_FATBINS)
# The package is not installed while it builds: run its NVRTC driver from the source tree
# (sys.path, not PYTHONPATH, which pip's build isolation uses itself).
_cudaq_realtime_python(_cudaq_py)
# (One expression: a ';' would split the CMake argument.)
set(_cudaq_main "__import__('sys').path.insert(0, __import__('sys').argv.pop(1)) or \
__import__('runpy').run_module('skbuild_cudaq', run_name='__main__')")

set(_cudaq_nvrtc_majors)
set(_cudaq_wanted ${SKBUILD_CUDAQ_RUNTIME_MAJORS})
if(NOT _cudaq_wanted)
  set(_cudaq_wanted 13 12)
endif()
foreach(_major IN LISTS _cudaq_wanted)
  set(_found "")
  set(_err "no Python interpreter")
  if(_cudaq_py)
    execute_process(
      COMMAND "${_cudaq_py}" -c "${_cudaq_main}" "${PROJECT_SOURCE_DIR}"
              nvrtc --find --cuda-major ${_major}
      OUTPUT_VARIABLE _found ERROR_VARIABLE _err
      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  endif()
  if(_found)
    list(APPEND _cudaq_nvrtc_majors ${_major})
    message(STATUS "skbuild-cudaq: device run time for CUDA ${_major}: NVRTC ${_found}")
  elseif(SKBUILD_CUDAQ_RUNTIME_MAJORS)
    message(FATAL_ERROR "skbuild-cudaq: building the device run time for CUDA ${_major}: ${_err}")
  endif()
endforeach()

function(_cudaq_runtime_fatbin major name)
  set(_src "${PROJECT_SOURCE_DIR}/skbuild_cudaq/device/${name}.cu")
  set(_dir "${PROJECT_BINARY_DIR}/_device/cu${major}")
  if(name IN_LIST _cudaq_runtime_graph_sources)
    set(_dir "${_dir}/graph")
  endif()
  set(_out "${_dir}/${name}.fatbin")
  # The built-in kernel's architecture is the default of dispatch kernels (architectures.txt).
  set(_archs ${SKBUILD_CUDAQ_DEFAULT_ARCHITECTURES})
  if(ARGN)  # NVRTC
    set(_command "${_cudaq_py}" -c "${_cudaq_main}" "${PROJECT_SOURCE_DIR}" nvrtc --cuda-major ${major}
        --arch ${_archs} "-I${SKBUILD_CUDAQ_INCLUDE_DIR}" --depfile "${_out}.d" --dep-target "${_out}"
        -o "${_out}" "${_src}")
    set(_what "NVRTC ${major}")
  else()
    # The package's own nvcc recipe (nvcc-recipe.txt), as for users' dispatch kernels.
    _cudaq_realtime_nvcc_recipe(fatbin _args SOURCE "${_src}" OUTPUT "${_out}" DEPFILE "${_out}.d"
      ARCHITECTURES ${_archs} FLAGS -std=c++17 "-I${SKBUILD_CUDAQ_INCLUDE_DIR}")
    set(_command "${SKBUILD_CUDAQ_NVCC}" ${_args})
    set(_what "nvcc")
  endif()
  file(MAKE_DIRECTORY "${_dir}")
  get_filename_component(_src_dir "${_src}" DIRECTORY)
  add_custom_command(
    OUTPUT "${_out}"
    COMMAND ${_command}
    DEPENDS "${_src}"
    DEPFILE "${_out}.d"
    WORKING_DIRECTORY "${_src_dir}"
    COMMENT "${_what} (LTO-IR) ${name}.cu -> _device/cu${major}"
    VERBATIM)
  set(SKBUILD_CUDAQ_RUNTIME_FATBINS ${SKBUILD_CUDAQ_RUNTIME_FATBINS} "${_out}" PARENT_SCOPE)
endfunction()

if(_cudaq_nvrtc_majors)
  foreach(_major IN LISTS _cudaq_nvrtc_majors)
    foreach(_name IN LISTS _cudaq_runtime_sources _cudaq_runtime_graph_sources)
      _cudaq_runtime_fatbin(${_major} ${_name} NVRTC)
    endforeach()
  endforeach()
else()
  _cudaq_realtime_find_nvcc("building skbuild-cudaq's device run time")
  execute_process(COMMAND "${SKBUILD_CUDAQ_NVCC}" --version
                  OUTPUT_VARIABLE _nvcc_version RESULT_VARIABLE _rc)
  if(NOT _nvcc_version MATCHES "release ([0-9]+)\\.")
    message(FATAL_ERROR "skbuild-cudaq: cannot tell the CUDA version of ${SKBUILD_CUDAQ_NVCC}")
  endif()
  set(_major ${CMAKE_MATCH_1})
  message(STATUS "skbuild-cudaq: device run time for CUDA ${_major}: nvcc ${SKBUILD_CUDAQ_NVCC}")
  foreach(_name IN LISTS _cudaq_runtime_sources _cudaq_runtime_graph_sources)
    _cudaq_runtime_fatbin(${_major} ${_name})
  endforeach()
endif()
add_custom_target(cudaq_device_runtime ALL DEPENDS ${SKBUILD_CUDAQ_RUNTIME_FATBINS})
