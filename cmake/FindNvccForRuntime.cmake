# Locates nvcc for building skbuild-cudaq's own device run time:
# CMAKE_CUDA_COMPILER, then CUDACXX, then PATH, then the nvidia-cuda-nvcc wheel.
# Sets SKBUILD_CUDAQ_NVCC.
include_guard(GLOBAL)

if(DEFINED CMAKE_CUDA_COMPILER AND EXISTS "${CMAKE_CUDA_COMPILER}")
  set(SKBUILD_CUDAQ_NVCC "${CMAKE_CUDA_COMPILER}")
elseif(DEFINED ENV{CUDACXX} AND EXISTS "$ENV{CUDACXX}")
  set(SKBUILD_CUDAQ_NVCC "$ENV{CUDACXX}")
else()
  find_program(SKBUILD_CUDAQ_NVCC nvcc)
  if(NOT SKBUILD_CUDAQ_NVCC AND DEFINED SKBUILD_CUDAQ_PYTHON_NVCC_HINT)
    find_program(SKBUILD_CUDAQ_NVCC nvcc HINTS "${SKBUILD_CUDAQ_PYTHON_NVCC_HINT}" NO_DEFAULT_PATH)
  endif()
endif()
if(NOT SKBUILD_CUDAQ_NVCC)
  message(FATAL_ERROR
    "skbuild-cudaq: nvcc not found; it is needed to build the package's device run time. "
    "Set CMAKE_CUDA_COMPILER (or the CUDACXX environment variable) to nvcc, put nvcc on PATH, "
    "or `pip install nvidia-cuda-nvcc`.")
endif()
message(STATUS "skbuild-cudaq: nvcc: ${SKBUILD_CUDAQ_NVCC}")
