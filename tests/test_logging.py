"""The run-time library logs through :mod:`logging`; only front doors show it.

An application routes or silences the library's messages like any library's;
the command-line front doors install the one handler that prints them.
"""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from skbuild_cudaq import _log
from skbuild_cudaq.realtime.link.cache import LinkCache

KEY = "0" * 64 + "-sm_90"


@pytest.fixture
def corrupt_cache(tmp_path: Path) -> Iterator[LinkCache]:
    """A link cache holding one corrupt entry (load() logs and returns None)."""
    cache = LinkCache(tmp_path / "cache")
    path = cache.store(KEY, b"cubin bytes")
    assert path is not None
    path.write_bytes(path.read_bytes()[:-3] + b"xyz")
    yield cache


@pytest.fixture
def library_logger() -> logging.Logger:
    """The ``skbuild_cudaq`` logger (conftest restores it after each test)."""
    return logging.getLogger("skbuild_cudaq")


def test_the_library_never_prints(
    corrupt_cache: LinkCache, library_logger: logging.Logger, capfd: pytest.CaptureFixture[str]
) -> None:
    del library_logger
    assert corrupt_cache.load(KEY) is None
    out, err = capfd.readouterr()
    assert out == err == ""


def test_an_application_routes_the_records(
    corrupt_cache: LinkCache, library_logger: logging.Logger, capfd: pytest.CaptureFixture[str]
) -> None:
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    library_logger.addHandler(Collect())
    library_logger.setLevel(logging.INFO)
    assert corrupt_cache.load(KEY) is None
    (record,) = records
    assert record.name == "skbuild_cudaq.realtime.link.cache"
    assert record.levelno == logging.WARNING  # recovered from: re-linked, entry replaced
    assert "is corrupt: not used; re-linking" in record.getMessage()
    assert capfd.readouterr().err == ""


def test_an_application_silences_even_a_front_door_handler(
    corrupt_cache: LinkCache,
    library_logger: logging.Logger,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SKBUILD_CUDAQ_VERBOSE", "1")
    _log.show_library_log()
    assert corrupt_cache.load(KEY) is None
    assert "link cache entry " in capfd.readouterr().err  # a warning: shown
    library_logger.setLevel(logging.CRITICAL)  # what an application does to silence it
    assert corrupt_cache.load(KEY) is None
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("verbose", ["1", "0"])
def test_the_front_door_shows_info_only_when_verbose(
    corrupt_cache: LinkCache,
    library_logger: logging.Logger,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    verbose: str,
) -> None:
    monkeypatch.setenv("SKBUILD_CUDAQ_VERBOSE", verbose)
    _log.show_library_log()
    _log.show_library_log()  # idempotent: one handler
    del corrupt_cache
    link = logging.getLogger("skbuild_cudaq.realtime.link.linker")
    link.info("link cache hit for %s", "ext.so")
    link.warning("cache %s", "unwritable")
    err = capfd.readouterr().err.splitlines()
    hits = [line for line in err if "link cache hit for ext.so" in line]
    assert len(hits) == (1 if verbose == "1" else 0)
    assert err.count("skbuild-cudaq: warning: cache unwritable") == 1


def test_realtime_code_does_not_print_through_log() -> None:
    """No module of the run time uses ``_log`` (the test server, a front door, is in cli/)."""
    root = Path(__file__).resolve().parent.parent / "skbuild_cudaq" / "realtime"
    users = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and any(a.name == "_log" for a in node.names):
                users.append(path.name)
    assert users == []


def test_cli_front_door_installs_the_handler(tmp_path: Path) -> None:
    """``python -m skbuild_cudaq`` shows the library's records (here: a corrupt cache entry)."""
    code = (
        "import sys, logging\n"
        "from skbuild_cudaq import __main__ as m\n"
        "from pathlib import Path\nfrom skbuild_cudaq.realtime.link.cache import LinkCache\n"
        f"c = LinkCache(Path({str(tmp_path / 'c')!r}))\n"
        f"p = c.store({KEY!r}, b'x' * 8); p.write_bytes(b'garbage')\n"
        "m.main(['--version'])\n"
        f"c.load({KEY!r})\n"
    )
    env_verbose = {"SKBUILD_CUDAQ_VERBOSE": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env_verbose, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "link cache entry " in proc.stderr and "re-linking" in proc.stderr, proc.stderr
