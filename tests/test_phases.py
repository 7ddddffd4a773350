"""``skbuild-cudaq phases``: the measurement build of a user's dispatch kernel, broken down.

Plain tests check the command line and the read-out (``breakdown`` of stamped records);
the toolchain test compiles example_app's kernel and handlers with the measurement build and
links them (no GPU); the GPU test runs the whole command on example_app's sources.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from _json_keys import assert_documented

from skbuild_cudaq.cli import _phases, main
from skbuild_cudaq.cli._args import dims

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "example_app" / "src"


# --- the command line (plain) --------------------------------------------------------------


def test_dims_and_payload_parse_what_the_help_says() -> None:
    assert dims("4") == (4, 1, 1)
    assert dims("2,3") == (2, 3, 1)
    for bad in ("0", "1,2,3,4", "x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="X\\[,Y,Z\\]"):
            dims(bad)
    assert _phases.payload_bytes("3") == b"\x00\x01\x02"
    assert _phases.payload_bytes("0a0B") == b"\x0a\x0b"
    with pytest.raises(argparse.ArgumentTypeError, match="byte count"):
        _phases.payload_bytes("xyz")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _phases.add_parser(parser.add_subparsers())
    return parser.parse_args(["phases", "k.cu", "--handler", "echo", *argv])


def test_the_launch_shape_defaults_to_the_kernels_own() -> None:
    assert _phases.launch_config(_args(), builtin=True) is None
    one = _phases.launch_config(_args("--cooperative"), builtin=False)
    assert (one.grid, one.block, one.cooperative) == ((1, 1, 1), (1, 1, 1), True)
    block = _phases.launch_config(_args("--grid", "2"), builtin=True)
    assert (block.grid, block.block) == ((2, 1, 1), (128, 1, 1))
    cluster = _phases.launch_config(_args("--cluster", "4", "--block", "128"), builtin=False)
    assert (cluster.grid, cluster.cluster, cluster.block) == ((4, 1, 1), (4, 1, 1), (128, 1, 1))
    warp = _phases.launch_config(_args("--block", "32", "--shared-mem", "8192"), builtin=False)
    assert warp.shared_mem == 8192


def test_missing_source_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["phases", str(tmp_path / "nope.cu"), "--handler", "echo"]) == 1
    assert "phases: source" in capsys.readouterr().err


def test_handler_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["phases", "k.cu"])
    assert exit_.value.code == 2
    assert "--handler" in capsys.readouterr().err


# --- the read-out (plain) ------------------------------------------------------------------


def _records(n: int, steps: list[int], *, ns_per_cycle: float = 0.5) -> object:
    """``n`` records whose stamps advance by ``steps`` cycles (0: that stamp not made)."""
    np = pytest.importorskip("numpy")
    out = np.zeros((n, 8), dtype=np.uint64)
    for i in range(n):
        t = 1_000_000 + 10_000 * i
        out[i, 0] = t
        for j, step in enumerate(steps, start=1):
            if step:
                t += step + (i % 3)  # a little spread; the median is the middle value
                out[i, j] = t
        out[i, 6] = 5_000_000 + 20_000 * i
        out[i, 7] = out[i, 6] + int((t - int(out[i, 0])) * ns_per_cycle)
    return out


def test_breakdown_gives_each_steps_median_in_microseconds() -> None:
    from skbuild_cudaq.realtime._phases import breakdown

    result = breakdown(_records(99, [2000, 400, 1000, 200, 600]))
    steps = dict(result.steps)
    assert list(steps) == ["staged", "looked_up", "handled", "header", "published"]
    # cycles of 0.5 ns (from the globaltimer over the same requests): 2001 cycles -> ~1.0 us
    assert result.ns_per_cycle == pytest.approx(0.5, rel=1e-3)
    assert steps["staged"] == pytest.approx(1.0005, rel=1e-3)
    assert steps["header"] == pytest.approx(0.1005, rel=1e-3)
    assert sum(steps.values()) == pytest.approx(result.device_us, rel=1e-3)
    assert result.missing == () and result.requests == 99


def test_a_stamp_the_kernel_never_makes_is_folded_into_the_next_step() -> None:
    from skbuild_cudaq.realtime._phases import breakdown

    # a kernel that validates on its own (no cudaq_validate_request): no looked_up stamp
    result = breakdown(_records(10, [2000, 0, 1000, 200, 600], ns_per_cycle=1.0))
    steps = dict(result.steps)
    assert result.missing == ("looked_up",)
    assert "looked_up" not in steps and steps["handled"] == pytest.approx(1.001, rel=1e-3)
    assert "not stamped (folded into the next step): looked_up" in result.table()[-1]


def test_the_json_document_has_the_documented_keys() -> None:
    from skbuild_cudaq.realtime._phases import breakdown

    result = breakdown(_records(10, [2000, 0, 1000, 200, 600], ns_per_cycle=1.0))
    doc = json.loads(_phases.json_document("k", "echo", "sm_90", result))
    assert doc["schema_version"] == 1 and doc["missing"] == ["looked_up"]
    assert_documented("phases --json OUT", doc)


def test_records_of_a_build_without_stamps_are_refused() -> None:
    np = pytest.importorskip("numpy")
    from skbuild_cudaq.realtime._phases import breakdown

    with pytest.raises(ValueError, match="shape"):
        breakdown(np.zeros((0, 8), dtype=np.uint64))
    with pytest.raises(ValueError, match="not a -DCUDAQ_REALTIME_PHASES build"):
        breakdown(np.zeros((4, 8), dtype=np.uint64))


# --- the measurement build compiles and links (toolchain) ----------------------------------


@pytest.mark.toolchain
def test_measurement_build_of_example_app_links_with_its_phase_log(
    nvcc: Path, tmp_path: Path
) -> None:
    """The stamps come from the detail header through the public one: the kernel, the
    handlers, the switch and the run time compile with the macro and link into one module
    that holds the phase log the read-out looks up."""
    pytest.importorskip("cuda.bindings")
    from skbuild_cudaq.build._handler_switch import write_switch
    from skbuild_cudaq.realtime.library import cubin_symbols
    from skbuild_cudaq.realtime.link._nvjitlink import link_blobs

    runtime = ROOT / "skbuild_cudaq" / "device"
    user = [EXAMPLE / "single_thread_dispatcher.cu", EXAMPLE / "handlers.cu"]
    switch = tmp_path / "handler_switch.cu"
    write_switch(switch, "test", user)
    sources = [
        runtime / "unified_dispatch_kernel.cu",
        runtime / "hook_defaults.cu",
        runtime / "host_ring_bridge.cu",
    ]
    fatbins = _phases._compile(
        _args("--compiler", "nvcc"), [*sources, *user, switch], "90", tmp_path
    )
    cubin = link_blobs([(f.name, f.read_bytes()) for f in fatbins], ["-arch=sm_90", "-lto"])
    assert b"cudaq_phase_log" in cubin and b"cudaq_phase_next" in cubin
    assert "single_thread_dispatcher" in cubin_symbols(cubin).kernels


# --- the whole command on a GPU ------------------------------------------------------------


@pytest.mark.gpu
def test_phases_breaks_down_example_apps_single_thread_kernel(nvcc: Path, tmp_path: Path) -> None:
    out = tmp_path / "phases.json"
    proc = subprocess.run(
        [
            sys.executable, "-m", "skbuild_cudaq", "phases",
            str(EXAMPLE / "single_thread_dispatcher.cu"), str(EXAMPLE / "handlers.cu"),
            "--kernel", "single_thread_dispatcher", "--handler", "echo_thread",
            "--requests", "3000", "--warmup", "300", "--json", str(out),
        ],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "seen -> staged" in proc.stdout and "round trip p50" in proc.stdout
    doc = json.loads(out.read_text())
    assert_documented("phases --json OUT", doc)
    assert doc["kernel"] == "single_thread_dispatcher" and doc["requests"] == 3000
    steps = doc["steps_us"]
    assert list(steps) == ["staged", "looked_up", "handled", "header", "published"]
    assert all(v > 0 for v in steps.values()) and doc["missing"] == []
    assert 0 < doc["device_us"] < doc["round_trip_p50_us"]
    assert doc["status"] == 0
