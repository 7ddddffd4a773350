"""PEP 517 backend ``skbuild_cudaq.build``: a thin wrapper of ``scikit_build_core.build``.

Every hook reads ``[tool.cudaq]`` (:func:`skbuild_cudaq.settings.load_settings`),
reports every problem at once and exits non-zero without a traceback, then
calls the scikit-build-core hook of the same name with extra config settings:

* ``cmake.define.CMAKE_PROJECT_INCLUDE`` = ``skbuild_cudaq_auto.cmake`` of this
  package, which defers (``cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR})``)
  one ``cudaq_realtime_add_dispatch_kernel`` per ``[tool.cudaq.dispatch-kernels]``
  entry to the end of the project's top-level ``CMakeLists.txt``: no CMake edits.
  A ``CMAKE_PROJECT_INCLUDE`` of the user's is kept (the auto file includes it).
* ``cmake.define.SKBUILD_CUDAQ_KERNEL_COUNT`` and, per entry ``i``,
  ``SKBUILD_CUDAQ_KERNEL_<i>_TARGET`` / ``_SOURCES`` (absolute paths) /
  ``_ARCHITECTURES`` (``;``-lists).
* ``cmake.define.skbuild_cudaq_DIR`` (unless set) so ``find_package`` finds us.
* ``cmake.define.SKBUILD_CUDAQ_NVCC_HINT`` when the nvcc that the shared search
  order (``cmake/nvcc-search.txt``) finds is the ``nvidia-cuda-nvcc`` wheel's:
  CMake's search takes it at the wheel step without asking Python again.
* ``cmake.define.SKBUILD_CUDAQ_COMPILER`` (``[tool.cudaq] compiler``: auto, nvcc or
  nvrtc; "auto" too, so that a build directory that stays forgets an earlier choice;
  without kernels only when not auto) and ``SKBUILD_CUDAQ_PYTHON`` (this interpreter,
  whose environment holds NVRTC when that is the compiler; see
  ``skbuild_cudaq_nvrtc.cmake``). The same name in ``-C cmake.define.`` or in
  ``[tool.scikit-build.cmake.define]`` wins, as it does for the build's requirements.

``get_requires_for_build_wheel`` (and ``_editable``) add, to what scikit-build-core asks
for (``cmake``, ``ninja`` where the system has none), the NVRTC wheels of the project's
CUDA major where no nvcc is found (:mod:`._requires`): a project builds with build
isolation on a machine without a CUDA toolkit and nothing about NVRTC in its requirements.

Our own ``-C cudaq.*`` config settings are removed before scikit-build-core
sees them (its config is strict); an unknown ``cudaq.*`` key is an error with
a "did you mean". Known keys: see :data:`CONFIG_SETTINGS`.

The build side's other modules live in this package too (private): ``_embed`` (the nvcc
compile and ``.incbin`` embed recipe), ``_toolchain`` (finding nvcc), ``_nvrtc`` (NVRTC
from pip) and ``_device_info`` (the ``__cudaq_rt_info`` build records); the architecture
grammar, which the settings share, is ``skbuild_cudaq._architectures``. scikit-build-core is
imported on the first hook call, not with this package, so that they load without it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from skbuild_cudaq import _log
from skbuild_cudaq._paths import cmake_dir
from skbuild_cudaq.errors import ConfigSettingsError, CudaqError, ToolchainError

__all__ = [
    "CONFIG_SETTINGS",
    "build_editable",
    "build_sdist",
    "build_wheel",
    "cmake_defines",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_config_settings",
]


def _import_backend() -> Any:
    """``scikit_build_core.build``, or the exception its import raised on ``./pyproject.toml``.

    scikit-build-core parses the project's ``pyproject.toml`` when it is imported (to
    decide whether it offers the metadata hooks) and lets a ``tomllib`` error, or a
    ``tool`` or ``[tool.scikit-build]`` of an unexpected type, escape. Then every hook
    below reports the file's problem as one line instead (:func:`_call`).
    """
    try:
        import importlib

        return importlib.import_module("scikit_build_core.build")
    except (ValueError, RecursionError, AttributeError, TypeError) as exc:
        return exc


_backend_once: list[Any] = []


def _backend() -> Any:
    """``scikit_build_core.build`` (or its import's exception), imported on first use."""
    if not _backend_once:
        _backend_once.append(_import_backend())
    return _backend_once[0]


ConfigSettings = dict[str, "list[str] | str"]
_T = TypeVar("_T")

#: The ``-C cudaq.<key>`` config settings this backend understands.
CONFIG_SETTINGS: Mapping[str, str] = {
    "cudaq.verbose": "true/false: print what skbuild-cudaq hands to CMake",
}
_PREFIX = "cudaq."
_DEFINE = "cmake.define."
_AUTO_INCLUDE = "skbuild_cudaq_auto.cmake"
#: Our defines that a ``-C cmake.define.<name>`` of the user's overrides.
_USER_WINS = frozenset({"SKBUILD_CUDAQ_COMPILER", "SKBUILD_CUDAQ_PYTHON"})
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class _Options(NamedTuple):
    """Our own config settings, parsed."""

    verbose: bool = False


def _one(value: list[str] | str) -> str:
    return value[-1] if isinstance(value, list) else value


def _split_own(config_settings: Mapping[str, Any] | None) -> tuple[dict[str, Any], _Options]:
    """Separate ``cudaq.*`` keys (validated) from what goes to scikit-build-core."""
    rest: dict[str, Any] = {}
    own: dict[str, str] = {}
    for key, value in (config_settings or {}).items():
        if key.startswith(_PREFIX):
            own[key] = _one(value)
        else:
            rest[key] = value
    problems = []
    for key in sorted(own):
        if key not in CONFIG_SETTINGS:
            import difflib

            close = difflib.get_close_matches(key, list(CONFIG_SETTINGS), n=1)
            hint = f"did you mean {close[0]!r}?" if close else ""
            known = ", ".join(sorted(CONFIG_SETTINGS))
            problems.append(f"unknown config setting {key!r}; {hint or 'known: ' + known}".rstrip())
    verbose = own.get("cudaq.verbose", "false").strip().lower()
    if verbose not in _TRUE | _FALSE:
        problems.append(
            f"config setting 'cudaq.verbose' = {own['cudaq.verbose']!r} is not a boolean; "
            "use true or false"
        )
    if problems:
        raise ConfigSettingsError("\n".join(problems))
    return rest, _Options(verbose=verbose in _TRUE)


def _read_pyproject(project_dir: Path) -> dict[str, Any] | None:
    """The project's ``pyproject.toml`` (None when there is none); :class:`CudaqError` when it
    cannot be read (:func:`skbuild_cudaq.settings.read_pyproject`)."""
    from skbuild_cudaq.settings import read_pyproject

    path = project_dir / "pyproject.toml"
    if not path.is_file():
        return None
    return read_pyproject(path)


def _table(data: Any, *keys: str) -> dict[str, Any]:
    """``data[k1][k2]...`` when each level is a table, else an empty one."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


def _nvcc_hint() -> Path | None:
    """nvcc of the ``nvidia-cuda-nvcc`` wheel when that is the only nvcc around."""
    from skbuild_cudaq.build._toolchain import find_nvcc, nvcc_from_wheel

    try:
        found = find_nvcc()
    except ToolchainError:
        return None  # CMake reports it, with the same message, if a kernel needs it
    wheel = nvcc_from_wheel()
    return found if wheel is not None and found == wheel else None


def cmake_defines(
    project_dir: Path,
    *,
    user_project_include: str | None = None,
    nvcc_hint: Path | None = None,
    pyproject: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The CMake variables that add every ``[tool.cudaq.dispatch-kernels]`` entry.

    ``pyproject`` is the parsed ``pyproject.toml`` when the caller has read it already
    (else it is read here). Raises :class:`~skbuild_cudaq.errors.SettingsError` listing
    every problem. Empty when the project declares no kernels.
    """
    from skbuild_cudaq.settings import load_settings, settings_from_pyproject

    path = project_dir / "pyproject.toml"
    settings = (
        load_settings(path) if pyproject is None else settings_from_pyproject(pyproject, path)
    )
    from skbuild_cudaq.build._requires import compiler_from_env

    kernels = settings.dispatch_kernels
    # "auto" too: SKBUILD_CUDAQ_COMPILER is a cache variable, so a build directory that
    # stays (editable rebuilds, -C build-dir) would keep an earlier "nvrtc" or "nvcc".
    # $SKBUILD_CUDAQ_COMPILER beats [tool.cudaq] compiler (prepare_config_settings: and
    # [tool.scikit-build.cmake.define], not -C cmake.define).
    chosen = compiler_from_env() or settings.compiler
    compiler = {"SKBUILD_CUDAQ_PYTHON": sys.executable, "SKBUILD_CUDAQ_COMPILER": chosen}
    if not kernels:  # nothing of ours may read them: pass them only when asked for
        return {} if chosen == "auto" else compiler
    defines = {
        "CMAKE_PROJECT_INCLUDE": str(cmake_dir() / _AUTO_INCLUDE),
        "SKBUILD_CUDAQ_KERNEL_COUNT": str(len(kernels)),
        **compiler,
    }
    for index, (target, entry) in enumerate(kernels.items()):
        sources = [str((project_dir / source).resolve()) for source in entry.sources]
        defines[f"SKBUILD_CUDAQ_KERNEL_{index}_TARGET"] = target
        defines[f"SKBUILD_CUDAQ_KERNEL_{index}_SOURCES"] = ";".join(sources)
        defines[f"SKBUILD_CUDAQ_KERNEL_{index}_ARCHITECTURES"] = ";".join(entry.architectures)
    if user_project_include:
        defines["SKBUILD_CUDAQ_USER_PROJECT_INCLUDE"] = user_project_include
    if nvcc_hint is not None:
        defines["SKBUILD_CUDAQ_NVCC_HINT"] = str(nvcc_hint)
    return defines


def prepare_config_settings(
    config_settings: Mapping[str, Any] | None, project_dir: Path, *, for_build: bool = True
) -> dict[str, Any]:
    """What scikit-build-core gets: ours stripped, the ``[tool.cudaq]`` defines added.

    ``for_build`` False (sdist, requirements, metadata) only validates.
    """
    rest, options = _split_own(config_settings)
    if options.verbose:
        os.environ["SKBUILD_CUDAQ_VERBOSE"] = "1"
    pyproject = _read_pyproject(project_dir)  # the one parse of the file in this hook
    user_defines = _table(pyproject, "tool", "scikit-build", "cmake", "define")
    user_include = rest.get(_DEFINE + "CMAKE_PROJECT_INCLUDE")
    if user_include is None:
        user_include = user_defines.get("CMAKE_PROJECT_INCLUDE")
    defines = cmake_defines(
        project_dir,
        user_project_include=str(_one(user_include)) if user_include else None,
        nvcc_hint=_nvcc_hint() if for_build else None,
        pyproject=pyproject,
    )
    if not for_build:
        return rest
    if defines and _DEFINE + "skbuild_cudaq_DIR" not in rest:
        defines["skbuild_cudaq_DIR"] = str(cmake_dir())
    from skbuild_cudaq.build._requires import COMPILER_ENV, compiler_from_env

    from_env = {COMPILER_ENV} if compiler_from_env() else set()
    for name, value in defines.items():
        in_table = name in user_defines and name not in from_env
        if name in _USER_WINS and (_DEFINE + name in rest or in_table):
            # -C cmake.define.SKBUILD_CUDAQ_COMPILER=... (or the same name in
            # [tool.scikit-build.cmake.define], unless $SKBUILD_CUDAQ_COMPILER is set)
            # beats [tool.cudaq] compiler
            continue
        rest[_DEFINE + name] = value
        _log.progress(f"cmake.define.{name}={value}")
    return rest


def _call(hook: Callable[[dict[str, Any]], _T], config_settings: Any, *, for_build: bool) -> _T:
    """Front door: typed errors become one message and a non-zero exit."""
    _log.show_library_log()
    try:
        prepared = prepare_config_settings(config_settings, Path.cwd(), for_build=for_build)
        backend = _backend()
        if isinstance(backend, Exception):  # ours was fine: scikit-build-core's own reading
            msg = (
                f"scikit-build-core cannot read pyproject.toml "
                f"({type(backend).__name__}: {backend}); check its [tool.scikit-build] table"
            )
            raise CudaqError(msg)
    except CudaqError as exc:
        _log.error(str(exc))
        raise SystemExit(1) from None
    return hook(prepared)


def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings | None = None,
    metadata_directory: str | None = None,
) -> str:
    return _call(
        lambda cs: str(_backend().build_wheel(wheel_directory, cs, metadata_directory)),
        config_settings,
        for_build=True,
    )


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings | None = None,
    metadata_directory: str | None = None,
) -> str:
    return _call(
        lambda cs: str(_backend().build_editable(wheel_directory, cs, metadata_directory)),
        config_settings,
        for_build=True,
    )


def build_sdist(sdist_directory: str, config_settings: ConfigSettings | None = None) -> str:
    return _call(
        lambda cs: str(_backend().build_sdist(sdist_directory, cs)),
        config_settings,
        for_build=False,
    )


def _with_device_compiler(requires: list[str], config_settings: Mapping[str, Any]) -> list[str]:
    """scikit-build-core's requirements, plus NVRTC where no nvcc will compile
    (:mod:`._requires`); the build log says which it is."""
    from skbuild_cudaq.build._requires import device_compiler_requires, python_device_requires
    from skbuild_cudaq.settings import settings_from_pyproject

    path = Path.cwd() / "pyproject.toml"
    pyproject = _read_pyproject(Path.cwd()) or {}
    settings = settings_from_pyproject(pyproject, path)  # validated by this hook already
    found = device_compiler_requires(
        pyproject, settings.compiler, config_settings, project_dir=Path.cwd()
    )
    if found.requirements:
        _log.info(found.reason)
    else:
        _log.progress(f"no NVRTC requirement added: {found.reason}")
    python = python_device_requires(pyproject, config_settings)
    if python.requirements:
        _log.info(python.reason)
    added = [*found.requirements, *python.requirements]
    return [*requires, *(r for r in added if r not in requires)]


def get_requires_for_build_wheel(config_settings: ConfigSettings | None = None) -> list[str]:
    return _call(
        lambda cs: _with_device_compiler(list(_backend().get_requires_for_build_wheel(cs)), cs),
        config_settings,
        for_build=False,
    )


def get_requires_for_build_editable(config_settings: ConfigSettings | None = None) -> list[str]:
    return _call(
        lambda cs: _with_device_compiler(list(_backend().get_requires_for_build_editable(cs)), cs),
        config_settings,
        for_build=False,
    )


def get_requires_for_build_sdist(config_settings: ConfigSettings | None = None) -> list[str]:
    return _call(
        lambda cs: list(_backend().get_requires_for_build_sdist(cs)),
        config_settings,
        for_build=False,
    )


# scikit-build-core offers the metadata hooks only where metadata is known
# without a build (no "failed" overrides); so do we. Looked up on access (PEP 517
# frontends ask with hasattr), when scikit-build-core has read ./pyproject.toml.
_METADATA_HOOKS = ("prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable")


def _metadata_hook(name: str) -> Callable[..., str]:
    def hook(metadata_directory: str, config_settings: ConfigSettings | None = None) -> str:
        return _call(
            lambda cs: str(getattr(_backend(), name)(metadata_directory, cs)),
            config_settings,
            for_build=False,
        )

    hook.__name__ = hook.__qualname__ = name
    return hook


def __getattr__(name: str) -> Any:
    if name in _METADATA_HOOKS:
        backend = _backend()
        if not isinstance(backend, Exception) and hasattr(backend, name):
            return _metadata_hook(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
