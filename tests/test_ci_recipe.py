"""``docs/guides/ci.md``, followed literally, where no nvcc exists anywhere.

The page's project is getting-started's plus its own files (the tests, the workflow); its console
block is the recipe. The plain tests keep the page, its workflow and getting-started in step. The
integration test writes the files, puts a copy of this checkout at ``./skbuild-cudaq`` and runs
every command in one shell, in a fresh directory and virtual environment, with pip's build
isolation -- and with the CUDA toolkit hidden from every place the nvcc search looks (``PATH``,
``CUDA_HOME``, ``CUDA_PATH``, ``CUDACXX``, ``CMAKE_CUDA_COMPILER``, the fixed roots through
``SKBUILD_CUDAQ_CUDA_ROOTS``; the isolated build environments hold no ``nvidia-cuda-nvcc``
wheel), as on a CI runner. So the project, which names nothing about NVRTC, builds with the NVRTC
the backend adds (zero-configuration NVRTC), its wheel passes ``check``, and its tests pass.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _doc_pages import (
    PROJECT,
    blocks,
    checkout_copy,
    commands_of,
    files_of,
    install_project,
    user_env,
    write_project,
)
from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PAGE = ROOT / "docs" / "guides" / "ci.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
WORKFLOW = f"{PROJECT}/.github/workflows/ci.yml"
TESTS = f"{PROJECT}/tests/test_my_app.py"


def page_text() -> str:
    return PAGE.read_text(encoding="utf-8")


def project_files() -> dict[str, str]:
    """Getting-started's project and the page's own files (the page adds, never replaces)."""
    base = files_of(GETTING_STARTED.read_text(encoding="utf-8"))
    own = files_of(page_text())
    assert not set(base) & set(own), set(base) & set(own)
    return {**base, **own}


def recipe() -> list[str]:
    return [c.line for c in commands_of(page_text())]


def workflow_commands(text: str) -> list[str]:
    """The lines of the workflow's one multi-line ``run: |`` step."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "run: |")
    indent = len(lines[start + 1]) - len(lines[start + 1].lstrip())
    out = []
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        if line.strip():
            out.append(line.strip())
    return out


# ---------------------------------------------------------------------------------------------
# The page, its workflow and getting-started agree (plain, fast)
# ---------------------------------------------------------------------------------------------


def test_the_recipe_builds_checks_and_tests() -> None:
    lines = recipe()
    assert lines[:2] == ["python3 -m venv .venv", ". .venv/bin/activate"]
    order = [
        next(i for i, line in enumerate(lines) if re.search(pattern, line))
        for pattern in (
            r"^pip wheel --no-deps --wheel-dir wheelhouse \./skbuild-cudaq$",
            r'^export PIP_FIND_LINKS=.*"wheelhouse"\)\.absolute\(\)\.as_uri\(\)',
            rf"^pip wheel --no-deps --wheel-dir dist \./{PROJECT}$",
            r"^pip install dist/\*\.whl pytest$",
            r"^skbuild-cudaq check dist/\*\.whl$",
            rf"^python -m pytest -ra {PROJECT}/tests$",
        )
    ]
    assert order == sorted(order), list(zip(order, lines, strict=False))
    # check links with the nvJitLink of the wheel's own run-time extra (its dependencies): a
    # skbuild-cudaq extra installed by name would be CUDA 13's for a CUDA 12 project too
    assert not any(re.search(r"pip install .*skbuild-cudaq\[", line) for line in lines), lines
    assert not any("--no-build-isolation" in line or "nvrtc" in line.lower() for line in lines)
    # the wheelhouse lines are getting-started's, word for word
    started = [c.line for c in commands_of(GETTING_STARTED.read_text(encoding="utf-8"))]
    assert lines[:4] == started[:4]


def test_the_workflow_runs_the_recipe() -> None:
    """The workflow's run step is the recipe without the virtual environment (setup-python
    gives a fresh one); the project it checks out is the one the recipe builds."""
    files = project_files()
    text = files[WORKFLOW].split("\n", 1)[1]
    assert workflow_commands(text) == recipe()[2:]
    assert "runs-on: ubuntu-latest" in text
    assert "path: my_app" in text and "path: skbuild-cudaq" in text


def test_the_project_names_nothing_about_nvrtc_and_tests_without_a_gpu() -> None:
    files = project_files()
    pyproject = tomllib.loads(files[f"{PROJECT}/pyproject.toml"])
    assert not any("nvrtc" in r.lower() for r in pyproject["build-system"]["requires"])
    assert "compiler" not in pyproject["tool"]["cudaq"]
    tests = files[TESTS]
    assert "check_package(" in tests and "HostDispatcher(" in tests
    assert "get_device_kernel" not in tests  # nothing that needs a GPU
    # the GPU test skips on the run time's "no GPU here" error alone, nothing broader
    gpu_test = files[f"{PROJECT}/tests/test_on_a_gpu.py"]
    assert "except NoDeviceError as exc:\n        pytest.skip(str(exc))" in gpu_test
    assert "except RealtimeError" not in gpu_test and "except Exception" not in gpu_test


# ---------------------------------------------------------------------------------------------
# Following the page, with no toolkit anywhere
# ---------------------------------------------------------------------------------------------


def no_toolkit_env() -> dict[str, str]:
    """A user's shell (as getting-started's test) on a machine where the nvcc search finds
    nothing."""
    env = user_env()
    for name in ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "CMAKE_CUDA_COMPILER"):
        env.pop(name, None)
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if p and not (Path(p) / "nvcc").exists()
    )
    env["SKBUILD_CUDAQ_CUDA_ROOTS"] = ""
    return env


@pytest.mark.integration
@pytest.mark.parametrize(
    ("extra", "compiler"),
    [("runtime", "NVRTC 13.0"), ("cu12", "NVRTC 12.9")],
    ids=["cuda13", "cuda12"],
)
def test_following_the_page_without_a_toolkit(
    extra: str, compiler: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The page's project as shown (``skbuild-cudaq[runtime]``), and as a CUDA 12 project
    (``skbuild-cudaq[cu12]``, the page says it builds with NVRTC 12.9): the recipe is the same,
    the wheel brings the run time of its own major, and ``check`` links with it."""
    from skbuild_cudaq._records import read_records
    from skbuild_cudaq.build._toolchain import find_nvcc
    from skbuild_cudaq.errors import ToolchainError

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (the page builds skbuild-cudaq from one)")
    env = no_toolkit_env()
    with pytest.raises(ToolchainError):  # the toolkit is hidden from the search itself
        find_nvcc(env)
    assert shutil.which("nvcc", path=env["PATH"]) is None
    where = tmp_path_factory.mktemp(f"ci recipe {extra}")
    checkout_copy(where / "skbuild-cudaq")
    files = project_files()
    pyproject = f"{PROJECT}/pyproject.toml"
    assert '"skbuild-cudaq[runtime]"' in files[pyproject]
    files[pyproject] = files[pyproject].replace("skbuild-cudaq[runtime]", f"skbuild-cudaq[{extra}]")
    write_project(files, where)
    script = "set -euxo pipefail\n" + "\n".join(recipe())
    proc = subprocess.run(
        ["bash", "-c", script], cwd=where, env=env, capture_output=True, text=True,
        timeout=2400, check=False,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"following {PAGE.name} failed:\n{log[-8000:]}"
    # check passed, naming the kernel, the handler and the architecture
    (wheel,) = (where / "dist").glob("my_app-*.whl")
    table = log[log.index(f"{wheel.name}:") :]
    row = next(line for line in table.splitlines() if "_core" in line)
    assert row.split()[1:4] == ["my_dispatcher", "rpc_increment", "sm_80"], row
    if extra == "runtime":  # the page's table is this project's: its cubin size is current
        (shown,) = [b for i, b in blocks(page_text()) if i == "text" and "checked 1 target" in b]
        page_row = next(line for line in shown.splitlines() if "_core" in line)
        size, page_size = (float(r.split()[-2]) for r in (row, page_row))
        assert abs(size - page_size) <= 0.1 * size, (row, page_row)
    assert "checked 1 target: 1 module, 1 link in " in log and "s: ok" in log
    # the GPU test skipped on NoDeviceError, its reason in the log (-ra): no driver here
    assert re.search(r"\b3 passed, 1 skipped\b", log), log[-3000:]
    skipped = r"SKIPPED \[1\] .*test_on_a_gpu\.py:\d+: cannot initialise CUDA"
    assert re.search(skipped, log), log[-3000:]
    # the build used the NVRTC the backend added (the pinned minor): nothing else was there
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.startswith("my_app/_core") and n.endswith(".so")]
        module = where / "module.so"
        module.write_bytes(zf.read(name))
    compilers = {r["compiler"] for r in read_records(module)}
    assert compilers == {compiler}, compilers


@pytest.mark.gpu
@pytest.mark.toolchain
def test_the_pages_gpu_test_serves_on_a_gpu(tmp_path: Path, nvcc: Path) -> None:
    """Where there is a GPU, the page's GPU test runs (it skips nowhere else but on
    NoDeviceError): getting-started's project built with this environment's skbuild-cudaq,
    the page's test file run with pytest against it."""
    files = project_files()
    target = install_project(write_project(files, tmp_path / "src"), tmp_path)
    test = tmp_path / "src" / PROJECT / "tests" / "test_on_a_gpu.py"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", str(test)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
        env=dict(os.environ, PYTHONPATH=str(target)),
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert re.search(r"\b1 passed\b", proc.stdout) and "skipped" not in proc.stdout, proc.stdout
