"""Option values the ``skbuild-cudaq`` commands check while parsing: a bad one is argparse's
usage line and exit status 2, in the command line's own terms (MiB, "leave the option out"),
before anything is read, linked or allocated."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from skbuild_cudaq.cli import _args, _phases


def _limit_memory() -> None:  # a regression fails with MemoryError, not by filling the host
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", *argv],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        preexec_fn=_limit_memory,
    )


def test_parse_limits_match_what_a_link_accepts() -> None:
    from skbuild_cudaq.realtime.link import linker as link

    assert _args.MAX_LINK_TIMEOUT == link._MAX_TIMEOUT
    assert _args.MIN_LINK_MEMORY_MIB << 20 == link._MIN_MEMORY
    assert _args.link_timeout("2.5") == 2.5
    assert _args.memory_mib("0") == 0
    assert _args.memory_mib("256") == 256
    assert [_args.architecture(a) for a in ("90", "lto_90", " sm_100 ")] == [
        "sm_90", "sm_90", "sm_100",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["link", "x.so", "--arch", "sm_90", "-o", "x.cubin", "--memory-limit", "-5"], "MiB"),
        (["link", "x.so", "--arch", "sm_90", "-o", "x.cubin", "--memory-limit", "100"], "MiB"),
        (["link", "x.so", "--arch", "sm_90", "-o", "x.cubin", "--timeout", "-1"], "seconds"),
        (["link", "x.so", "--arch", "sm_90", "-o", "x.cubin", "--timeout", "1e7"], "seconds"),
        (["check", "x.whl", "--timeout", "nan"], "seconds"),
        (["check", "x.whl", "--timeout", "0"], "seconds"),
        (["check", "x.whl", "--arch", "foo"], "sm_XY"),
        (["link", "x.so", "--arch", "ampere", "-o", "x.cubin"], "sm_XY"),
        # one grammar with [tool.cudaq] architectures, which refuse "90a" (issue 56)
        (["link", "x.so", "--arch", "sm_90a", "-o", "x.cubin"], "link for sm_90"),
        (["check", "x.whl", "--arch", "100f"], "link for sm_100"),
    ],
)
def test_bad_link_limits_are_usage_errors_in_the_options_terms(
    argv: list[str], option: str, tmp_path: Path
) -> None:
    done = _run(*argv, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    option_name = next(a for a in reversed(argv) if a.startswith("--"))
    assert f"error: argument {option_name}: expected" in last
    assert option in last
    assert "None" not in last  # the API's spelling of "no limit", not the command line's
    assert "in bytes" not in last
    assert "Traceback" not in done.stderr


def test_phases_refuses_a_payload_larger_than_a_slot_before_allocating_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "k.cu").write_text("__device__ int x;\n", encoding="utf-8")
    # one digit too many: ~100 GB if it were made into bytes while parsing
    done = _run("phases", "k.cu", "--handler", "echo", "--payload", "99999999999", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "skbuild-cudaq: error: phases: a --payload of 99999999999 bytes does not fit a ring slot "
        "of --slot-size 256 bytes (24 of them the request header): use a larger --slot-size or "
        "a smaller --payload"
    ]
    edge = _run("phases", "k.cu", "--handler", "echo", "--payload", "233", cwd=tmp_path)
    assert "a --payload of 233 bytes does not fit a ring slot of --slot-size 256" in edge.stderr
    parser = argparse.ArgumentParser()
    _phases.add_parser(parser.add_subparsers())
    largest = parser.parse_args(["phases", "k.cu", "--handler", "echo", "--payload", "232"])
    assert _phases._fitting_payload(largest) == bytes(range(232))


def test_phases_refuses_a_json_file_it_could_not_write_before_measuring(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text("__device__ int x;\n", encoding="utf-8")
    done = _run("phases", "k.cu", "--handler", "echo", "--json", "no/such/out.json", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "skbuild-cudaq: error: phases: cannot write --json no/such/out.json: its directory "
        "does not exist"
    ]
