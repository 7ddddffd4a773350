# SPDX-License-Identifier: Apache-2.0
# Version of the skbuild_cudaq CMake package (kept equal to skbuild_cudaq.__version__;
# tests/test_cmake_package.py checks it). Compatibility: same major version and, while the
# major version is 0, the same minor version; never older than requested.
set(PACKAGE_VERSION "0.1.0")

if(PACKAGE_FIND_VERSION AND PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(PACKAGE_FIND_VERSION AND NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL "0"
       AND NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL "${PACKAGE_VERSION_MAJOR}")
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" _skbuild_cudaq_mm "${PACKAGE_VERSION}")
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION AND CMAKE_MATCH_1 STREQUAL "0")
    if(NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL "0"
       OR NOT PACKAGE_FIND_VERSION_MINOR STREQUAL CMAKE_MATCH_2)
      set(PACKAGE_VERSION_COMPATIBLE FALSE)
    endif()
  endif()
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
