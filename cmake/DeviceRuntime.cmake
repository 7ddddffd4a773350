# skbuild-cudaq's own device run time (included by the top-level CMakeLists.txt):
# each skbuild_cudaq/device/<name>.cu becomes the LTO-IR fatbin
# _device/<name>.fatbin (lto_80), rebuilt when the source or a header it
# includes changes. Sets SKBUILD_CUDAQ_RUNTIME_FATBINS.
include_guard(GLOBAL)

# The package's own CMake module finds nvcc the way it does for users, in the one order of
# skbuild_cudaq/cmake/nvcc-search.txt (CMAKE_CUDA_COMPILER, CUDACXX, PATH, CUDA_HOME,
# CUDA_PATH, /usr/local/cuda, /opt/cuda, the nvidia-cuda-nvcc wheel), and lists every place
# it tried if there is none.
include("${PROJECT_SOURCE_DIR}/skbuild_cudaq/cmake/skbuild_cudaqConfig.cmake")
_cudaq_realtime_find_nvcc("building skbuild-cudaq's device run time")

set(_cudaq_runtime_sources
    unified_dispatch_kernel
    host_ring_bridge)
set(SKBUILD_CUDAQ_RUNTIME_FATBINS)
foreach(_name IN LISTS _cudaq_runtime_sources)
  set(_src "${PROJECT_SOURCE_DIR}/skbuild_cudaq/device/${_name}.cu")
  set(_out "${PROJECT_BINARY_DIR}/_device/${_name}.fatbin")
  add_custom_command(
    OUTPUT "${_out}"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${PROJECT_BINARY_DIR}/_device"
    COMMAND "${SKBUILD_CUDAQ_NVCC}" -fatbin -rdc=true -std=c++17
            "-gencode=arch=compute_80,code=lto_80" "-I${SKBUILD_CUDAQ_INCLUDE_DIR}"
            -MD -MF "${_out}.d" -o "${_out}" "${_src}"
    DEPENDS "${_src}"
    DEPFILE "${_out}.d"
    COMMENT "nvcc (LTO-IR) ${_name}.cu"
    VERBATIM)
  list(APPEND SKBUILD_CUDAQ_RUNTIME_FATBINS "${_out}")
endforeach()
add_custom_target(cudaq_device_runtime ALL DEPENDS ${SKBUILD_CUDAQ_RUNTIME_FATBINS})
