"""tests/packages/py_handlers: a project whose only device code is a Python file of handlers
(issue 53), built with plain pip and build isolation on a machine with no CUDA toolkit.

The integration test builds skbuild-cudaq's wheel from this checkout into a wheelhouse, then the
package with ``pip wheel`` (isolated: the backend adds numba-cuda and NVVM to the build
requirements itself, no NVRTC), with nvcc hidden from every place the nvcc search looks, and
runs ``skbuild-cudaq check`` on the wheel: both declared architectures link, each handler
named. A copy with a handler numba cannot type fails the build in one ``skbuild-cudaq:
error:`` line naming the handler and its file.
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
from _doc_pages import checkout_copy, user_env
from conftest import ROOT

PACKAGE = ROOT / "tests" / "packages" / "py_handlers"

BROKEN = '''

@handler
def py_broken(args, result):
    """Typing error: uint8 arrays have no such attribute."""
    return args.no_such_attribute
'''


def no_toolkit_env() -> dict[str, str]:
    env = user_env()
    for name in ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "CMAKE_CUDA_COMPILER"):
        env.pop(name, None)
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if p and not (Path(p) / "nvcc").exists()
    )
    env["SKBUILD_CUDAQ_CUDA_ROOTS"] = ""
    return env


def test_the_package_declares_only_python_device_code() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    pyproject = tomllib.loads((PACKAGE / "pyproject.toml").read_text(encoding="utf-8"))
    kernels = pyproject["tool"]["cudaq"]["dispatch-kernels"]
    assert kernels == {
        "_core": {"sources": ["src/py_handlers/device.py"], "architectures": ["80", "90"]}
    }
    requires = " ".join(pyproject["build-system"]["requires"]).lower()
    assert "nvrtc" not in requires and "numba" not in requires and "nvvm" not in requires
    assert not list(PACKAGE.rglob("*.cu"))


@pytest.mark.integration
def test_python_handlers_build_without_a_toolkit_and_pass_check(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from skbuild_cudaq.build._device_info import read_records

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (skbuild-cudaq's wheel is built from one)")
    env = no_toolkit_env()
    assert shutil.which("nvcc", path=env["PATH"]) is None
    where = tmp_path_factory.mktemp("py handlers")
    checkout_copy(where / "skbuild-cudaq")
    shutil.copytree(PACKAGE, where / "py_handlers")
    shutil.copytree(PACKAGE, where / "py_broken")
    device = where / "py_broken" / "src" / "py_handlers" / "device.py"
    device.write_text(device.read_text(encoding="utf-8") + BROKEN, encoding="utf-8")
    script = "\n".join(
        [
            "set -euxo pipefail",
            "python3 -m venv .venv",
            ". .venv/bin/activate",
            "pip wheel --no-deps --wheel-dir wheelhouse ./skbuild-cudaq",
            "export PIP_FIND_LINKS=\"$(python -c 'import pathlib; "
            'print(pathlib.Path("wheelhouse").absolute().as_uri())\')"',
            "pip wheel --no-deps --wheel-dir dist ./py_handlers",
            "pip install dist/*.whl",
            "skbuild-cudaq check dist/*.whl",
            "echo BROKEN-BUILD-STARTS",
            "! pip wheel --no-deps --wheel-dir broken ./py_broken",
        ]
    )
    proc = subprocess.run(
        ["bash", "-c", script], cwd=where, env=env, capture_output=True, text=True,
        timeout=3000, check=False,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-8000:]
    (wheel,) = (where / "dist").glob("py_handlers-*.whl")
    table = log[log.index(f"{wheel.name}:") : log.index("BROKEN-BUILD-STARTS")]
    rows = [line.split() for line in table.splitlines() if "sm_" in line]
    assert [w for r in rows for w in r if w.startswith("sm_")] == ["sm_80", "sm_90"], table
    assert {"py_checksum", "py_increment"} <= {w for r in rows for w in r}, table
    assert "checked 1 target: 1 module, 2 links in " in table and "s: ok" in table
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.startswith("py_handlers/_core")]
        module = where / "module.so"
        module.write_bytes(zf.read(name))
    (record,) = read_records(module)
    assert record["source"] == "src/py_handlers/device.py"
    assert record["handlers"] == ["py_checksum", "py_increment"]
    assert record["compiler"].startswith("numba-cuda ")
    # the broken copy: one error line naming the handler, its file and numba's reason
    broken = log[log.index("BROKEN-BUILD-STARTS") :]
    errors = [line for line in broken.splitlines() if "skbuild-cudaq: error:" in line]
    assert len(errors) == 1, broken[-6000:]
    assert re.search(
        r"skbuild-cudaq: error: numba-cuda could not compile handler py_broken of "
        r"src/py_handlers/device\.py for CMake target _core: .*no_such_attribute",
        errors[0],
    ), errors[0]
    assert "Traceback" not in broken
