from setuptools import Extension, setup

# The only build code of the project: the extension, its handlers (.cu) and the
# flags its sources (and the dispatch kernel) are compiled with.
setup(
    ext_modules=[
        Extension(
            "setuptools_pkg._core",
            sources=["src/_core.cpp", "src/handlers.cu"],
            include_dirs=["include"],
            define_macros=[("SETUPTOOLS_PKG_FROM_SETUP", "1"), ("SETUPTOOLS_PKG_UNDEFINED", "1")],
            undef_macros=["SETUPTOOLS_PKG_UNDEFINED"],
            extra_compile_args=["-std=c++20", "-DSETUPTOOLS_PKG_FROM_ARGS=2"],
        )
    ]
)
