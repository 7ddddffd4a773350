"""The ``skbuild_cudaq`` CMake package (``skbuild_cudaqConfig.cmake``).

A regular package so that scikit-build-core's ``cmake.prefix`` entry point
(``skbuild_cudaq = "skbuild_cudaq.cmake"``) can resolve it with
``importlib.resources.files``: this directory is then on ``CMAKE_PREFIX_PATH``
and ``find_package(skbuild_cudaq CONFIG REQUIRED)`` works under plain
``scikit_build_core.build`` as soon as skbuild-cudaq is in ``build-system.requires``.
"""
