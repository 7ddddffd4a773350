"""The stale-segment sweep of the test server's shared-memory rings (``realtime/host/_shm.py``)
under names anyone can plant in ``/dev/shm`` (issue 56, item 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skbuild_cudaq.realtime.host import _shm

TOKEN = "0123456789abcdef"


@pytest.fixture
def shm_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(_shm, "SHM_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("pid", ["9999999999", "4194305", "0", "0000000000"])
def test_a_planted_name_with_a_pid_no_server_has_is_skipped(shm_dir: Path, pid: str) -> None:
    """A pid no C int holds made ``os.kill`` raise OverflowError: every server start failed."""
    planted = shm_dir / f"cudaq-rt-ring-{pid}-{TOKEN}"
    planted.write_bytes(b"x")
    hidden = shm_dir / f".cudaq-rt-ring-{pid}-{TOKEN}.new"
    hidden.write_bytes(b"x")
    assert _shm.sweep() == 0
    segment = _shm.create(4096)
    try:
        assert len(segment.buf) == 4096
    finally:
        segment.close()
    assert planted.exists() and hidden.exists()  # not ours to parse: never removed


def test_what_is_not_a_regular_file_of_yours_is_never_touched(shm_dir: Path) -> None:
    """A link, a directory or a FIFO of this naming is skipped before its pid is looked at;
    a dead server's own segment still goes."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    target = shm_dir / "target"
    target.write_bytes(b"keep")
    (shm_dir / f"cudaq-rt-ring-{dead}-{'1' * 16}").symlink_to(target)
    (shm_dir / f"cudaq-rt-ring-{dead}-{'2' * 16}").mkdir()
    os.mkfifo(shm_dir / f"cudaq-rt-ring-{dead}-{'3' * 16}")
    stale = shm_dir / f"cudaq-rt-ring-{dead}-{'4' * 16}"
    stale.write_bytes(b"left by a killed server")
    assert _shm.sweep() == 1
    assert not stale.exists()
    assert target.read_bytes() == b"keep"
    assert sorted(p.name for p in shm_dir.iterdir()) == [
        f"cudaq-rt-ring-{dead}-{c * 16}" for c in "123"
    ] + ["target"]


def test_a_planted_segment_does_not_stop_a_server(tmp_path: Path) -> None:
    """In the real ``/dev/shm``: a host-ring server starts, serves and exits 0."""
    if not Path(_shm.SHM_DIR).is_dir():
        pytest.skip("no /dev/shm")
    planted = Path(_shm.SHM_DIR) / f"cudaq-rt-ring-9999999999-{os.urandom(8).hex()}"
    planted.write_bytes(b"planted")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "skbuild_cudaq.cli.server", "--path=host",
             "--transport=host-ring", "--num-slots=4", "--slot-size=64", "--timeout=1"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "CUDAQ_REALTIME_SERVER_READY transport=host-ring" in proc.stdout
        assert "Traceback" not in proc.stderr
        assert planted.exists()
    finally:
        planted.unlink(missing_ok=True)
