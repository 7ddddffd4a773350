"""Editable installs, as ``docs/guides/pyproject.md`` ("Editable installs") says.

The section's commands, run on getting-started's project in a virtual environment of its own
(which sees this environment's packages: scikit-build-core, skbuild-cudaq, setuptools; the page's
first command installs those two, which it has): the editable install with rebuild on import,
the ``python -c '...print(m.__file__)'`` idiom printing nothing but the module's path, the
caveat the page warns of (scikit-build-core's verbose rebuild prints to stdout), a kernel change
picked up at the next import, and ``check`` of the editable distribution.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest
from _doc_pages import PROJECT, commands_of, files_of, write_project
from conftest import ROOT

PAGE = ROOT / "docs" / "guides" / "pyproject.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"


def section_commands() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("(editable-installs)=") :]
    end = section.find("\n## ", section.index("## ") + 3)
    return [c.line for c in commands_of(section if end < 0 else section[:end])]


def test_the_section_installs_editable_with_rebuild_and_quiet() -> None:
    first, install, idiom = section_commands()
    assert first == "pip install scikit-build-core skbuild-cudaq"
    assert install.startswith(f"pip install --no-build-isolation -e ./{PROJECT} ")
    for option in ("editable.rebuild=true", "build-dir=", "editable.verbose=false"):
        assert option in install, option
    assert idiom == "python -c 'import my_app._core as m; print(m.__file__)'"


def _environment(where: Path) -> tuple[Path, dict[str, str]]:
    """A virtual environment that sees this one's packages (a ``.pth`` adding its site
    directory, whose own ``.pth`` files, skbuild-cudaq's editable finder among them, count)."""
    venv.EnvBuilder(with_pip=True).create(where)
    python = where / "bin" / "python"
    site_dir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = sysconfig.get_path("purelib")
    (Path(site_dir) / "outer-environment.pth").write_text(
        f"import site; site.addsitedir({ours!r})\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    env["PATH"] = os.pathsep.join([str(where / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(where)
    env.pop("SKBUILD_EDITABLE_VERBOSE", None)
    return Path(site_dir), env


def _run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, check=False,
        timeout=900,
    )  # fmt: skip


@pytest.mark.integration
@pytest.mark.toolchain
def test_editable_install_rebuilds_on_import_and_checks(tmp_path: Path, nvcc: Path) -> None:
    from skbuild_cudaq._records import read_records
    from skbuild_cudaq.realtime import check_package

    where = tmp_path / "work"
    project = write_project(files_of(GETTING_STARTED.read_text(encoding="utf-8")), where)
    site_dir, env = _environment(tmp_path / "venv")
    env["CUDACXX"] = str(nvcc)
    _first, install, idiom = section_commands()  # the first: this environment has both
    proc = _run(install, where, env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    # the idiom prints the module's path and nothing else: a file in the build tree
    proc = _run(idiom, where, env)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    module = Path(line)
    assert module.is_file() and str(project / "build") in line, line
    assert "site-packages" not in line
    # the caveat is real: scikit-build-core's verbose rebuild prints to stdout
    proc = _run(idiom, where, {**env, "SKBUILD_EDITABLE_VERBOSE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("Running cmake --build"), proc.stdout
    assert proc.stdout.splitlines()[-1] == line
    # a kernel changed: the next import rebuilds and re-embeds it
    kernel = project / "src" / "my_dispatcher.cu"
    second = 'extern "C" __global__ void my_second(CUDAQ_DISPATCH_KERNEL_PARAMS) {}\n'
    kernel.write_text(kernel.read_text() + second)
    proc = _run(idiom, where, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [line]
    kernels = {k for r in read_records(module) for k in r["kernels"]}
    assert kernels == {"my_dispatcher", "my_second"}, kernels
    # check finds the editable distribution's module in the build tree and links it
    report = check_package("my-app", path=[str(site_dir)])
    assert report.ok, [str(p) for p in report.problems]
    assert report.target == "my-app 0.1.0 (installed, editable)"
    (checked,) = report.modules
    assert checked.kernels == ("my_dispatcher", "my_second")
    assert checked.module == f"my_app/{module.name}"
