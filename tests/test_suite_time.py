"""How long the suite takes (issue 56, item 13): the README's quick subset, and the order files
run in under ``tools/test.sh``.

The quick command's marker expression names only registered markers and selects plain tests and
no ``toolchain`` or ``integration`` one. Files run heaviest tier first (``tests/conftest.py``) and
xdist keeps that order (``--no-loadscope-reorder``): its default, the files with the fewest tests
last, left the one-test demo -- the longest file -- to the end, one worker alone for minutes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
_QUICK = re.compile(r'^bash tools/test\.sh -m "([^"]+)"', re.MULTILINE)
_KEYWORDS = {"and", "or", "not"}
#: Files of each tier, the plain one first: integration (demo), toolchain and plain (check),
#: plain (wire).
_SAMPLE = ("tests/test_wire.py", "tests/test_check.py", "tests/test_demo.py")


def _quick_expression() -> str:
    found = _QUICK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(found) == 1, f"the README shows one quick command, found {found}"
    return found[0]


def _collect(*args: str) -> tuple[int, list[str]]:
    """pytest's exit status and the files of the tests it collects, in order."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *args, *_SAMPLE],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
    )  # fmt: skip
    files = [line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line]
    return proc.returncode, list(dict.fromkeys(files))


def test_the_readme_quick_subset_is_a_valid_marker_expression() -> None:
    expression = _quick_expression()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    markers = {m.split(":")[0] for m in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
    names = set(re.findall(r"[A-Za-z_]\w*", expression)) - _KEYWORDS
    assert names and names <= markers, f"{names - markers} are no registered markers"
    status, files = _collect("-m", expression)
    assert status == 0 and "tests/test_wire.py" in files and "tests/test_demo.py" not in files
    # no toolchain or integration test in it (pytest's status 5: nothing collected)
    status, files = _collect("-m", f"({expression}) and (toolchain or integration)")
    assert (status, files) == (5, [])


def test_files_run_heaviest_tier_first_in_the_order_xdist_is_told_to_keep() -> None:
    status, files = _collect()
    assert (status, files) == (
        0,
        ["tests/test_demo.py", "tests/test_check.py", "tests/test_wire.py"],
    )
    script = (ROOT / "tools" / "test.sh").read_text(encoding="utf-8")
    assert "--dist loadfile" in script and "--no-loadscope-reorder" in script
