// Project header found through the Extension's include_dirs, by the host
// sources, the handlers and the dispatch kernel alike.
#pragma once

#ifndef SETUPTOOLS_PKG_FROM_SETUP
#error "define_macros of the Extension did not reach this source"
#endif
#ifdef SETUPTOOLS_PKG_UNDEFINED
#error "undef_macros of the Extension did not reach this source (after define_macros)"
#endif
#if !defined(SETUPTOOLS_PKG_FROM_ARGS) || SETUPTOOLS_PKG_FROM_ARGS != 2
#error "-D in extra_compile_args of the Extension did not reach this source"
#endif
#if defined(__CUDACC__) && __cplusplus < 202002L
#error "the Extension's -std=c++20 did not reach nvcc"
#endif

#define SETUPTOOLS_PKG_INCREMENT 1
