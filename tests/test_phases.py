"""``skbuild-cudaq phases``: the measurement build of a user's dispatch kernel, or of a graph
handler served by the graph dispatch kernel, broken down.

Plain tests check the command line and the read-out (``breakdown`` of stamped records, made
here with known steps); the toolchain tests compile example_app's kernel and handlers, and its
graph handler's kernels with the graph dispatch kernel, with the measurement build and link
them (no GPU), and read the stamps in the linked SASS; the GPU tests run the whole command on
example_app's sources.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import site
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
    out = np.zeros((n, 16), dtype=np.uint64)
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
    # the means: each step's, adding up to the device's mean (the globaltimer's, exactly)
    means = dict(result.means)
    assert list(means) == list(steps) and means["handled"] == pytest.approx(0.5005, rel=1e-3)
    assert sum(means.values()) == pytest.approx(result.device_mean_us, rel=1e-9)
    assert result.path == "dispatch" and result.graph is None


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
        breakdown(np.zeros((0, 16), dtype=np.uint64))
    with pytest.raises(ValueError, match=r"shape \(n, 16\)"):
        breakdown(np.zeros((4, 8), dtype=np.uint64))  # the records of 16 words
    with pytest.raises(ValueError, match="not a -DCUDAQ_REALTIME_PHASES build"):
        breakdown(np.zeros((4, 16), dtype=np.uint64))


# --- a graph handler's records (plain) ------------------------------------------------------

#: The SM clock's steps of the synthetic graph records (cycles, each plus 0, 1 or 2): staged,
#: looked_up, filled, launch; and the launch call (plus 0, 2 or 4).
_CLOCK_STEPS = (400, 200, 600, 1000)
_CALL = 300
#: %globaltimer steps (ns, each plus 0, 1 or 2): started, done, published; the hand-over after
#: the launch call's return.
_TIMER_STEPS = (1500, 3000, 800)
_HANDOVER = 4000


def _graph_records(n: int = 99, *, handed_over: tuple[int, ...] = (49, 98)) -> object:
    """``n`` graph handler records as phases.cuh lays them out, an SM clock of 0.5 ns a cycle:
    record ``i`` has its steps plus ``i % 3`` (so each step's median is its mean), 3 refused
    launches every tenth, and the relaunches ``handed_over``."""
    np = pytest.importorskip("numpy")
    out = np.zeros((n, 16), dtype=np.uint64)
    for i in range(n):
        spread = i % 3
        clock = [1_000_000 + 100_000 * i]
        for step in _CLOCK_STEPS:
            clock.append(clock[-1] + step + spread)
        seen, launch = clock[0], clock[-1]
        out[i, [0, 1, 2, 8, 9]] = clock
        call = _CALL + 2 * spread
        out[i, 11] = launch + call
        out[i, 6] = 7_000_000_000 + 50_000 * i
        out[i, 10] = int(out[i, 6]) + (launch - seen) // 2  # 0.5 ns a cycle
        timer = [int(out[i, 10])]
        for step in _TIMER_STEPS:
            timer.append(timer[-1] + step + spread)
        out[i, [12, 13, 7]] = timer[1:]
        out[i, 14] = 3 if i % 10 == 0 else 0
        if i in handed_over:
            out[i, 15] = int(out[i, 10]) + call // 2 + _HANDOVER
    return out


def test_a_graph_handlers_records_give_each_step_and_the_launch() -> None:
    from skbuild_cudaq.realtime._phases import GRAPH_STEPS, breakdown

    result = breakdown(_graph_records())
    assert result.path == "graph" and result.requests == 99 and result.missing == ()
    assert result.ns_per_cycle == pytest.approx(0.5, rel=1e-12)
    steps, means = dict(result.steps), dict(result.means)
    assert tuple(steps) == GRAPH_STEPS == tuple(means)
    # clock steps: (cycles + 1) x 0.5 ns; timer steps: ns + 1 (the median and mean of 0, 1, 2)
    expected = [(c + 1) * 0.5e-3 for c in _CLOCK_STEPS] + [(t + 1) * 1e-3 for t in _TIMER_STEPS]
    assert list(steps.values()) == pytest.approx(expected, rel=1e-12)
    assert list(means.values()) == pytest.approx(expected, rel=1e-12)
    device = (sum(_CLOCK_STEPS) + 4) * 0.5e-3 + (sum(_TIMER_STEPS) + 3) * 1e-3
    assert result.device_us == pytest.approx(device, rel=1e-12)
    assert sum(means.values()) == pytest.approx(result.device_mean_us, rel=1e-12)
    graph = result.graph
    assert graph is not None
    assert graph.launch_call_us == pytest.approx((_CALL + 2) * 0.5e-3, rel=1e-12)
    assert (graph.retried, graph.retries_max) == (10, 3)
    assert graph.retries_mean == pytest.approx(30 / 99, rel=1e-12)
    assert graph.relaunches == 2 and graph.relaunch_us == pytest.approx(_HANDOVER * 1e-3)
    assert graph.timer_step_ns == _TIMER_STEPS[2]  # the smallest: done -> published, spread 0
    table = result.table()
    assert table[3].startswith("looked_up -> filled") and table[5].startswith("launch -> started")
    assert any(line.startswith("launch -> launched (the call)") for line in table)
    assert any("dispatch graph relaunches: 2" in line for line in table)


def test_a_graph_whose_kernels_never_read_their_context_folds_started() -> None:
    from skbuild_cudaq.realtime._phases import breakdown

    records = _graph_records(9, handed_over=())
    records[:, 12] = 0  # no cudaq_graph_io from thread 0 of block 0
    result = breakdown(records)
    steps = dict(result.steps)
    assert result.missing == ("started",) and "started" not in steps
    assert steps["done"] == pytest.approx((_TIMER_STEPS[0] + _TIMER_STEPS[1] + 2) * 1e-3)
    assert sum(dict(result.means).values()) == pytest.approx(result.device_mean_us, rel=1e-12)
    assert result.graph is not None and result.graph.relaunches == 0
    assert math.isnan(result.graph.relaunch_us)
    assert result.graph.as_dict()["relaunch_us"] is None  # JSON has no NaN


def test_graph_records_that_cannot_be_one_requests_are_refused() -> None:
    from skbuild_cudaq.realtime._phases import breakdown

    unpublished = _graph_records(6)
    unpublished[2, 13] = 0  # the graph's kernels built without the macro: no publish stamps
    with pytest.raises(ValueError, match="compile the graph's kernels"):
        breakdown(unpublished)
    backwards = _graph_records(6)
    backwards[4, 12] = backwards[4, 10] - 1  # started before its launch began
    with pytest.raises(ValueError, match="1 graph phase records whose stamps go backwards"):
        breakdown(backwards)
    clock = _graph_records(6)
    clock[1, 8] = clock[1, 9] + 1  # filled after the launch
    with pytest.raises(ValueError, match="go backwards"):
        breakdown(clock)
    mixed = _graph_records(6)
    mixed[5, 10] = 0  # a record no graph launch stamped (a device function's)
    with pytest.raises(ValueError, match="5 of 6 phase records are a graph handler's"):
        breakdown(mixed)
    kernel = _graph_records(6)
    kernel[3, 8] = 0  # no context filled: not the graph dispatch kernel's measurement build
    with pytest.raises(ValueError, match="graph dispatch kernel's stamps"):
        breakdown(kernel)


def test_the_round_trips_after_a_relaunch_are_those_following_a_hand_over() -> None:
    np = pytest.importorskip("numpy")
    from skbuild_cudaq.realtime._phases import after_relaunch_p50

    records = _graph_records(20, handed_over=(4, 9, 19))
    times = np.arange(20, dtype=float)  # request i took i us
    # the measured ones: the last 12 (requests 8..19); after a hand-over: 10 (and not 5)
    assert after_relaunch_p50(records, times[8:]) == 10.0
    assert after_relaunch_p50(records, times) == 7.5  # requests 5 and 10
    assert math.isnan(after_relaunch_p50(records, times[11:]))


def test_the_json_document_of_a_graph_handler_has_the_documented_keys() -> None:
    from skbuild_cudaq.realtime._phases import breakdown

    doc = json.loads(
        _phases.json_document(
            "cudaq_realtime_graph_dispatch", "g", "sm_90", breakdown(_graph_records())
        )
    )
    assert doc["path"] == "graph" and list(doc["steps_us"])[3] == "launch"
    assert (
        doc["graph"]["relaunches"] == 2 and doc["graph"]["after_relaunch_round_trip_p50_us"] is None
    )
    assert_documented("phases --json OUT", doc)


# --- --graph on the command line (plain) -----------------------------------------------------

FACTORY = """
GRAPH_HANDLERS = ("decode",)


def graph_handler(name, library, device):
    raise AssertionError("not built before the checks")


not_callable = 3
"""


@pytest.fixture
def factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A graph factory module of one graph handler, ``decode`` (importable for this test)."""
    (tmp_path / "phases_test_graphs.py").write_text(FACTORY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "phases_test_graphs:graph_handler"


def _graph_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["phases", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("skbuild-cudaq: error: phases: "), err
    return err


def test_a_graph_name_the_factory_does_not_build_is_refused(
    factory: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = str(EXAMPLE / "graph_handlers.cu")
    err = _graph_error(capsys, source, "--graph", "nope", "--graph-factory", factory)
    assert f"--graph nope: {factory} builds no graph handler 'nope' (it builds decode)" in err


def test_a_device_handler_given_as_a_graph_is_refused(
    factory: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = [str(EXAMPLE / "graph_handlers.cu"), str(EXAMPLE / "handlers.cu")]
    err = _graph_error(capsys, *sources, "--graph", "echo", "--graph-factory", factory)
    assert "handlers.cu exports echo as a device handler (DEVICE_CALL), not a graph" in err
    assert "measure it with --handler echo" in err


def test_a_graph_factory_that_cannot_be_loaded_is_refused(
    factory: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = str(EXAMPLE / "graph_handlers.cu")
    module = factory.partition(":")[0]
    err = _graph_error(capsys, source, "--graph", "decode", "--graph-factory", f"{module}:nothing")
    assert "cannot load it" in err
    err = _graph_error(capsys, source, "--graph", "decode", "--graph-factory", "no_such_mod_xyz")
    assert "--graph-factory=no_such_mod_xyz: cannot load it (No module named" in err
    err = _graph_error(
        capsys, source, "--graph", "decode", "--graph-factory", f"{module}:not_callable"
    )
    assert err.rstrip().endswith("not callable")


@pytest.mark.parametrize(
    "option", [["--kernel", "k"], ["--grid", "2"], ["--cooperative"], ["--block", "32,2"]]
)
def test_a_graph_takes_no_launch_of_a_dispatch_kernel(
    factory: str, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    source = str(EXAMPLE / "graph_handlers.cu")
    err = _graph_error(capsys, source, "--graph", "decode", "--graph-factory", factory, *option)
    assert "served by the built-in graph dispatch kernel in one block" in err


def test_the_default_graph_factory_is_the_test_servers() -> None:
    from skbuild_cudaq.cli import server

    assert _phases.DEFAULT_GRAPH_FACTORY == server.DEFAULT_GRAPH_FACTORY


def test_handler_and_graph_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["phases", "k.cu", "--handler", "echo", "--graph", "decode"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["phases", "k.cu"])
    assert exit_.value.code == 2
    assert "one of the arguments --handler --graph is required" in capsys.readouterr().err


# --- the measurement build compiles and links (toolchain) ----------------------------------


@pytest.mark.toolchain
def test_measurement_build_of_example_app_links_with_its_phase_log(
    nvcc: Path, tmp_path: Path
) -> None:
    """The stamps come from the detail header through the public one: the kernel, the
    handlers, the switch and the run time compile with the macro and link into one module
    that holds the phase log the read-out looks up."""
    pytest.importorskip("cuda.bindings")
    from skbuild_cudaq.realtime.library import cubin_symbols

    user = [EXAMPLE / "single_thread_dispatcher.cu", EXAMPLE / "handlers.cu"]
    cubin = _phases.build_cubin(_args("--compiler", "nvcc"), user, "90", tmp_path)
    assert b"cudaq_phase_log" in cubin and b"cudaq_phase_next" in cubin
    assert "single_thread_dispatcher" in cubin_symbols(cubin).kernels


@pytest.fixture(scope="module")
def nvdisasm() -> Path:
    """nvdisasm (the ``nvidia-cuda-nvdisasm`` wheel of the test extra, or a toolkit's)."""
    found = shutil.which("nvdisasm")
    if found:
        return Path(found)
    for packages in {*site.getsitepackages(), site.getusersitepackages()}:
        for candidate in sorted(Path(packages).glob("nvidia/*/bin/nvdisasm")):
            return candidate
    pytest.skip("no nvdisasm (pip install nvidia-cuda-nvdisasm)")


def _sass(nvdisasm: Path, cubin: bytes, where: Path) -> dict[str, list[str]]:
    """Each function's SASS in ``cubin``: its instructions and labels, in order."""
    path = where / "module.cubin"
    path.write_bytes(cubin)
    text = subprocess.run(
        [str(nvdisasm), "-c", str(path)], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    functions: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.splitlines():
        if match := re.match(r"\s*\.text\.(\w+):", line):
            lines = functions.setdefault(match.group(1), [])
        elif re.match(r"\s*(/\*[0-9a-f]+\*/|\.L_x_\d+:)", line):
            lines.append(" ".join(line.split()))
    return functions


def _production_graph_module(nvcc: Path, work: Path) -> bytes:
    """The graph dispatch kernel with example_app's graph kernels, compiled without the macro
    (as the package and example_app build them), linked like the measurement build."""
    from skbuild_cudaq.build._embed import CompileFlags, fatbin_command, run_compile
    from skbuild_cudaq.realtime.link._nvjitlink import link_blobs
    from skbuild_cudaq.realtime.link.device_runtime import find_device_runtime

    runtime = ROOT / "skbuild_cudaq" / "device"
    sources = [
        runtime / "graph_dispatch_kernel.cu",
        runtime / "hook_defaults.cu",
        runtime / "host_ring_bridge.cu",
        EXAMPLE / "graph_handlers.cu",
    ]
    blobs = []
    for i, source in enumerate(sources):
        out = work / f"{i}.fatbin"
        command = fatbin_command(nvcc, source, out, architectures=["90"], flags=CompileFlags())
        run_compile(command, out, str(source), cwd=source.parent)
        blobs.append((out.name, out.read_bytes()))
    devrt = find_device_runtime()
    return link_blobs(blobs, ["-arch=sm_90", "-lto"], libraries=[(devrt.name, devrt.read_bytes())])


_TIMER = "SR_GLOBALTIMERLO"
_CLOCK = "SR_CLOCKLO"


def _reads(lines: list[str], register: str) -> int:
    return sum(register in line for line in lines)


def _blocks_calling(lines: list[str], callee: str) -> list[list[str]]:
    """The instructions from the last label before each call of ``callee`` to the call."""
    blocks: list[list[str]] = []
    block: list[str] = []
    for line in lines:
        if line.startswith(".L_x_"):
            block = []
        elif f"`({callee})" in line:
            blocks.append(block)
            block = []
        else:
            block.append(line)
    return blocks


@pytest.mark.toolchain
def test_measurement_build_of_a_graph_handler_stamps_each_step(
    nvcc: Path, nvdisasm: Path, tmp_path: Path
) -> None:
    """example_app's graph kernels with the graph dispatch kernel, as ``phases --graph`` builds
    them: the module holds the phase log, and the linked SASS stamps where phases.cuh says --
    the launch between an SM clock and a %globaltimer read and the call, the graph's kernels
    ``started`` (an atomic compare-and-swap into word 12 of the record), ``done`` (word 13)
    and ``published`` (word 7, %globaltimer read after the response flag's release and before
    the context's). The production build of the same sources reads neither clock there."""
    pytest.importorskip("cuda.bindings")
    from skbuild_cudaq.realtime.library import cubin_symbols

    (tmp_path / "phases").mkdir()
    cubin = _phases.build_cubin(
        _args("--compiler", "nvcc"), [EXAMPLE / "graph_handlers.cu"], "90", tmp_path / "phases",
        graph=True,
    )  # fmt: skip
    assert b"cudaq_phase_log" in cubin and b"cudaq_phase_next" in cubin
    kernels = cubin_symbols(cubin).kernels
    assert {"cudaq_realtime_graph_dispatch", "graph_increment_stage"} <= set(kernels)
    sass = _sass(nvdisasm, cubin, tmp_path)
    dispatch = sass["cudaq_realtime_graph_dispatch"]
    # the launch: clock and timer read right before the call (each attempt's)
    assert any(
        _reads(block, _CLOCK) and _reads(block, _TIMER)
        for block in _blocks_calling(dispatch, "cudaGraphLaunch")
    )
    for kernel in ("graph_increment_stage", "graph_increment_publish"):
        started = [i for i, line in enumerate(sass[kernel]) if "ATOM.E.CAS.64" in line]
        assert started and "+0x60]" in sass[kernel][started[0]], kernel  # word 12
        assert any(_TIMER in line for line in sass[kernel][: started[0]]), kernel
    publish = sass["graph_increment_publish"]
    flag = next(i for i, line in enumerate(publish) if "STG.E.STRONG.SYS" in line)
    released = next(i for i, line in enumerate(publish) if "STG.E.STRONG.GPU" in line)
    assert _reads(publish[flag:released], _TIMER) == 1  # published: after the flag's release
    assert _reads(publish[started[0] : flag], _TIMER) == 1  # done: cudaq_graph_publish entered
    stores = publish[released:]
    assert any("+0x68]" in line for line in stores) and any("+0x38]" in line for line in stores)

    (tmp_path / "production").mkdir()
    production = _production_graph_module(nvcc, tmp_path / "production")
    assert b"cudaq_phase_log" not in production
    plain = _sass(nvdisasm, production, tmp_path)
    for kernel in ("graph_increment_stage", "graph_increment_publish"):
        assert _reads(plain[kernel], _TIMER) == 0 and not any("ATOM" in x for x in plain[kernel])
    assert _reads(plain["cudaq_realtime_graph_dispatch"], _CLOCK) == 0
    assert _reads(dispatch, _TIMER) > _reads(plain["cudaq_realtime_graph_dispatch"], _TIMER)


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
    assert doc["status"] == 0 and doc["path"] == "dispatch" and doc["graph"] is None
    means = doc["steps_mean_us"]
    assert sum(means.values()) == pytest.approx(doc["device_mean_us"], rel=1e-6)


@pytest.mark.gpu
def test_phases_breaks_down_example_apps_graph_handler(
    nvcc: Path, core: object, tmp_path: Path
) -> None:
    """``phases --graph graph_increment`` on example_app's graph kernels, built by its factory
    (the default), through the graph dispatch kernel: every step stamped in every record (the
    read-out refuses stamps out of order), each mean positive and the means adding up to the
    device's, the device inside the round trip, 3,300 requests over 33 relaunches."""
    from skbuild_cudaq.realtime._driver import ordinal_arch
    from skbuild_cudaq.realtime._phases import GRAPH_STEPS

    arch = ordinal_arch(0)
    if int(arch[3:].rstrip("af")) < 90:
        pytest.skip(f"device graph launch needs sm_90+, device 0 is {arch}")
    out = tmp_path / "phases.json"
    proc = subprocess.run(
        [
            sys.executable, "-m", "skbuild_cudaq", "phases", str(EXAMPLE / "graph_handlers.cu"),
            "--graph", "graph_increment", "--payload", "8",
            "--requests", "3000", "--warmup", "300", "--json", str(out),
        ],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "looked_up -> filled" in proc.stdout and "launch -> started" in proc.stdout
    doc = json.loads(out.read_text())
    assert_documented("phases --json OUT", doc)
    assert (doc["path"], doc["kernel"], doc["handler"]) == (
        "graph", "cudaq_realtime_graph_dispatch", "graph_increment",
    )  # fmt: skip
    assert doc["requests"] == 3000 and doc["status"] == 0 and doc["missing"] == []
    assert tuple(doc["steps_us"]) == GRAPH_STEPS == tuple(doc["steps_mean_us"])
    means = doc["steps_mean_us"]
    assert all(v > 0 for v in means.values()), means
    assert all(v >= 0 for v in doc["steps_us"].values()), doc["steps_us"]
    assert sum(means.values()) == pytest.approx(doc["device_mean_us"], rel=1e-6)
    assert 0 < doc["device_us"] < doc["round_trip_p50_us"]
    graph = doc["graph"]
    assert graph["launch_call_us"] > 0 and graph["timer_step_ns"] > 0
    assert 0 <= graph["retried"] <= 3000 and graph["retries_mean"] >= 0
    assert graph["relaunches"] >= 29  # one every 100 launches
    assert graph["relaunch_us"] > 0 and graph["after_relaunch_round_trip_p50_us"] > 0
