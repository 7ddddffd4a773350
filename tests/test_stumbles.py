"""Small stumbles a new user met (issue 56, item 14), each kept fixed by a plain test.

The demo script's log, the setuptools guide's install step, and the documented way to force the
NVRTC route; the architecture grammar of ``link`` is in ``tests/test_link.py`` and
``tests/test_cli_args.py``, the ``nvrtc`` command's message in ``tests/test_nvrtc.py``, the test
server's ``--version`` and help in ``tests/test_server.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_BACKGROUND_TO_FILE = re.compile(r'>"\$(\w+)"(?:\s+2>&1)?\s*&\s*$')


def test_the_demo_makes_each_log_before_a_background_job_writes_it() -> None:
    """``cmd >"$out" &`` opens ``$out`` in the background job, maybe after the script's next
    ``grep ... "$out"``: grep then printed ``No such file`` (a spurious line in the README's
    first command). Each such log is made by the script itself first."""
    lines = (ROOT / "tools" / "demo.sh").read_text(encoding="utf-8").splitlines()
    jobs = [
        (i, m.group(1)) for i, line in enumerate(lines) if (m := _BACKGROUND_TO_FILE.search(line))
    ]
    assert jobs, "the demo starts its server in the background with its output in a file"
    for index, name in jobs:
        made = [line for line in lines[:index] if re.fullmatch(rf':\s*>"\${name}"', line.strip())]
        assert made, f'tools/demo.sh line {index + 1}: make "${name}" (: >"${name}") before the job'


def test_the_variable_that_forces_the_nvrtc_route_is_documented_where_users_look() -> None:
    """A machine with a CUDA toolkit reproduces a toolkit-less CI runner with one environment
    variable (its behaviour: tests/test_build_requires.py, test_nvrtc.py, test_cmake_errors.py)."""
    from skbuild_cudaq.build._requires import COMPILER_ENV

    for page in ("docs/guides/ci.md", "docs/guides/cuda-versions.md"):
        text = " ".join((ROOT / page).read_text(encoding="utf-8").split())
        assert f"{COMPILER_ENV}=nvrtc pip wheel" in text, page
