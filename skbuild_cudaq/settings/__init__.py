"""``[tool.cudaq]`` settings: documented dataclasses, validation that reports every problem.

The package, in the manner of scikit-build-core's ``settings``:

* :mod:`._model` -- the model: the dataclasses that are the single description of
  ``[tool.cudaq]`` (the converter, the JSON schema and the docs table derive from them);
* :mod:`._fields` -- the field metadata (:func:`setting`) and scalar :class:`Rule` framework;
* :mod:`._rules` -- the rules of the values (targets, kernel sources, architectures, compiler);
* :mod:`._sources` -- ``pyproject.toml`` to the model, every problem reported at once;
* :mod:`.json_schema` -- the JSON schema and the reference table;
* :mod:`._toml_text` -- values and key paths shown as TOML.

Every front door (the ``skbuild_cudaq.build`` backend, the setuptools command,
``python -m skbuild_cudaq schema --check``) calls :func:`load_settings` (or
:func:`settings_from_pyproject` on a file it has already read) and, on
:class:`~skbuild_cudaq.errors.SettingsError`, prints ``str(error)`` (one line per
problem: key path, bad value, what is accepted, how to fix) and exits non-zero.

This package is build-side only: the run time never imports it.
"""

from __future__ import annotations

from skbuild_cudaq._architectures import (
    DEFAULT_ARCHITECTURES,
    MAX_ARCHITECTURE,
    MIN_ARCHITECTURE,
)
from skbuild_cudaq.settings._fields import FieldSpec, Meta, Rule, describe, field_specs, setting
from skbuild_cudaq.settings._model import ROOT_KEY, CudaqSettings, DispatchKernelSettings
from skbuild_cudaq.settings._rules import (
    ARCHITECTURE,
    COMPILER,
    COMPILERS,
    KERNEL_SOURCE,
    TARGET_NAME,
    UNSAFE_PATH_CHARS,
    unsafe_path_chars,
)
from skbuild_cudaq.settings._sources import (
    load_settings,
    near_miss_tables,
    parse_settings,
    read_pyproject,
    settings_from_pyproject,
)
from skbuild_cudaq.settings._toml_text import format_key, show_value

__all__ = [
    "ARCHITECTURE",
    "COMPILER",
    "COMPILERS",
    "DEFAULT_ARCHITECTURES",
    "KERNEL_SOURCE",
    "MAX_ARCHITECTURE",
    "MIN_ARCHITECTURE",
    "ROOT_KEY",
    "TARGET_NAME",
    "UNSAFE_PATH_CHARS",
    "CudaqSettings",
    "DispatchKernelSettings",
    "FieldSpec",
    "Meta",
    "Rule",
    "describe",
    "field_specs",
    "format_key",
    "load_settings",
    "near_miss_tables",
    "parse_settings",
    "read_pyproject",
    "setting",
    "settings_from_pyproject",
    "show_value",
    "unsafe_path_chars",
]
