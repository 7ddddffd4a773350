"""Setuptools front door: ``[tool.cudaq.dispatch-kernels]`` for setuptools projects.

Two entry points of skbuild-cudaq plug it into setuptools; a project only declares its
``Extension`` in ``setup.py`` and the table in ``pyproject.toml`` (keys are full extension
names, ``"pkg._core"``). As scikit-build-core splits its own front doors, one module each:

:mod:`.hook` (``setuptools.finalize_distribution_options``)
    Runs for *every* setuptools build in an environment where skbuild-cudaq is installed,
    so it is cheap: it does nothing unless ``pyproject.toml`` has a ``[tool.cudaq]``
    table; then it wraps the project's ``build_ext`` (setuptools' own, or the one in
    ``setup(cmdclass=...)``) with :class:`~.build_ext.CudaqBuildExtMixin`.

:mod:`.command` (``distutils.commands``: ``build_cudaq_kernels``)
    The nvcc half, also runnable on its own (``setup.py build_cudaq_kernels``): every
    dispatch kernel compiled on its own to an LTO-IR fatbin with the extension's include
    directories, macros and C++ standard; every ``.cu`` source of an extension compiled
    with ``-c -rdc=true`` (its handlers' LTO-IR lands in ``__nv_relfatbin``); the
    generated embed C source. Incremental (depfiles + recorded command lines). What it
    makes for each extension is an ``ExtensionPlan`` (``_plan``).

:mod:`.build_ext` (:class:`~.build_ext.CudaqBuildExtMixin`)
    The wrapped ``build_ext`` runs ``build_cudaq_kernels`` first, then builds each
    extension without its ``.cu`` sources, linking the handler objects, the compiled
    embed source and the static CUDA runtime instead.

Library code raises typed errors; the command and the wrapped ``build_ext`` are the front
door that prints them and exits.
"""

from __future__ import annotations

__all__: list[str] = []
