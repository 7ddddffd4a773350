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
