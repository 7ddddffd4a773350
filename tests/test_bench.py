"""The benchmark suite's own logic, without a GPU: statistics, goals, repeated runs, the native
client against a ring answered on the host, and every script importable with ``--help``.

The page the results become is tested in ``tests/test_docs.py``.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _bench import BENCH, load_bench

SCRIPTS = (
    "dispatch", "graph", "multigpu", "startup", "build_overhead", "report", "wire", "python_device",
)  # fmt: skip


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_imports_and_explains_itself_without_a_gpu(name: str) -> None:
    """``--help`` works where there is no GPU, and importing a script touches no CUDA."""
    pytest.importorskip("numpy")
    proc = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), "--help"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout and "--out" in proc.stdout
    code = (
        f"import sys; sys.path.insert(0, {str(BENCH)!r}); import {name}; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cuda'))"
    )
    imported = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert imported.stdout.strip() == "[]"


def _package_names(tree: ast.AST) -> Iterator[tuple[str, str | None]]:
    """(module, name) of every ``skbuild_cudaq`` import in ``tree`` and of every attribute
    read from a module imported under an alias (``rt.get_device_kernel``); name None: the
    module itself. Source in string constants (a benchmark's child processes) is read too."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("skbuild_cudaq"):
            yield from ((str(node.module), a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("skbuild_cudaq"):
                    aliases[a.asname or a.name] = a.name
                    yield a.name, None
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in aliases:
                yield aliases[node.value.id], node.attr
        elif isinstance(node, ast.Constant) and "skbuild_cudaq" in str(node.value):
            with contextlib.suppress(SyntaxError):
                yield from _package_names(ast.parse(str(node.value)))


@pytest.mark.parametrize("name", (*SCRIPTS, "common"))
def test_every_package_name_a_script_uses_exists(name: str) -> None:
    """Whatever a benchmark imports from the package (most of it only on a GPU, where a moved
    or renamed name would cost a run) exists, and ``python -m`` modules it starts are there."""
    source = (BENCH / f"{name}.py").read_text(encoding="utf-8")
    for module, attr in _package_names(ast.parse(source)):
        found = importlib.import_module(module)
        if attr is not None and not hasattr(found, attr):  # or a submodule not imported yet
            sub = hasattr(found, "__path__") and importlib.util.find_spec(f"{module}.{attr}")
            assert sub, f"{name}.py: {module} has no {attr}"
    for module in re.findall(r'"-m", "(skbuild_cudaq[\w.]*)"', source):
        assert importlib.util.find_spec(module) is not None, f"{name}.py: no module {module}"


# --- statistics and goals ------------------------------------------------------------------


def test_paired_ratios_cancel_a_drift_that_a_first_floor_does_not() -> None:
    """Each round divided by the floor measured right before it: a drift over the run (on a
    lent H200 the floor's p50 rose 0.27 us in a dozen seconds) cancels, where dividing by one
    floor measured first would not."""
    common = load_bench("common")
    floors = [4.30 + 0.05 * i for i in range(5)]  # the host drifts up
    values = [f * 1.07 for f in floors]  # a kernel 7 % over its floor in every round
    paired = common.paired_ratio(values, floors)
    assert paired["ratio"] == pytest.approx(1.07)
    assert paired["ratios"] == pytest.approx([1.07] * 5)
    assert sorted(v / floors[0] for v in values)[2] > 1.09  # what one first floor would say
    with pytest.raises(ValueError, match="3 values for 2 floors"):
        common.paired_ratio([1.0, 2.0, 3.0], [1.0, 2.0])


def test_goals_are_judged_on_their_bound() -> None:
    common = load_bench("common")
    assert common.meets(0.8, ">= 0.8") and not common.meets(1.051, "<= 1.05")
    assert common.goal(1.2, "<= 1.25", handler_shape="thread") == {
        "value": 1.2, "goal": "<= 1.25", "met": True, "handler_shape": "thread",
    }  # fmt: skip
    with pytest.raises(ValueError, match="not '== 1'"):
        common.meets(1.0, "== 1")
    np = pytest.importorskip("numpy")
    p = common.percentiles(np.arange(1, 101, dtype=float))
    assert (p["p50"], p["min"], p["n"]) == (50.5, 1.0, 100)


def _pair(ratio: float, tail: float = 1.05, floor_tail: float = 1.3) -> dict[str, Any]:
    one = {"p50_over_floor": ratio, "p99_over_p50": tail, "floor_p99_over_p50": floor_tail}
    return {"b2b": one, "random": dict(one)}


def test_dispatch_goals_follow_the_shapes_measured() -> None:
    dispatch = load_bench("dispatch")
    results = {
        "paired": {
            "single_thread:thread": {**_pair(1.06), "serial": {"over_floor": 0.96}},
            "cluster": _pair(1.30, tail=1.3),
        },
        "throughput_mrps": {"warp_parallel:thread": {"64": 6.6}, "warp_floor": {"64": 8.0}},
        "python_client_us": {"over_native_p50_us": -0.06},
    }
    goals = dispatch.judge(results)
    assert goals["single_thread:thread_p50_over_floor"]["met"] is False  # 1.06 > 1.05
    assert goals["single_thread:thread_p50_over_floor"]["handler_shape"] == "thread"
    assert goals["single_thread:thread_serial_over_pingpong_serial"]["met"] is True
    # the launch-wide cluster row has no p50 bound (its bare hand-off alone is over it), a tail
    assert "cluster_p50_over_floor" not in goals
    assert goals["cluster_p99_over_p50"] == {
        "value": 1.3, "goal": "<= 1.25", "met": False, "handler_shape": "launch",
        "floor_value": 1.3,
    }  # fmt: skip
    assert goals["warp_parallel:thread_over_warp_floor_at_64"]["value"] == pytest.approx(0.825)
    assert goals["python_call_over_native_client_us"]["met"] is True
    assert "python_call_over_native_client_random_arrival_us" not in goals  # not measured
    assert "python_call_batch_mrps_warp_parallel" not in goals


def test_repeated_runs_judge_each_goal_on_its_median_and_keep_the_spread() -> None:
    """``--repeat``: a goal one run meets and the next misses is judged on the median; the
    spread, and the floor's own tail run by run, stay in the file."""
    dispatch = load_bench("dispatch")

    def run(date: str, ratio: float, tail: float, errors: dict[str, str]) -> dict[str, Any]:
        goals = dispatch.judge({"paired": {"single_thread:thread": _pair(ratio, floor_tail=tail)}})
        return {"date": date, "elapsed_s": 24.0, "latency_us": {"t": date}, "errors": errors,
                "goals": goals}  # fmt: skip

    combined = dispatch.combine_runs(
        [run("a", 1.050, 1.40, {}), run("b", 1.082, 1.36, {"x": "boom"}), run("c", 1.063, 1.33, {})]
    )
    st = combined["goals"]["single_thread:thread_p50_over_floor"]
    assert st["value"] == pytest.approx(1.063) and st["met"] is False and st["met_runs"] == 1
    assert (st["min"], st["max"], st["values"]) == (1.050, 1.082, [1.050, 1.082, 1.063])
    tail = combined["goals"]["single_thread:thread_p99_over_p50"]
    assert tail["floor_value"] == pytest.approx(1.36) and tail["floor_values"] == [1.4, 1.36, 1.33]
    assert "floor_value" not in st
    assert combined["repeat"] == 3 and combined["latency_us"] == {"t": "c"}  # the last run's
    assert [r["date"] for r in combined["runs"]] == ["a", "b", "c"]
    assert combined["errors"] == {"run 2: x": "boom"}
    assert combined["elapsed_s"] == pytest.approx(72.0)


def test_the_python_client_is_timed_call_by_call_and_every_answer_checked() -> None:
    """``timed_calls`` (bench/dispatch.py, graph.py and wire.py time ``RingClient.call`` with
    it) against a ring answered by the host path's Python echo."""
    np = pytest.importorskip("numpy")
    common = load_bench("common")
    from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher, echo
    from skbuild_cudaq.realtime.ring import RingLayout

    payload = bytes(range(common.ARG_LEN))
    layout = RingLayout(common.NUM_SLOTS, common.SLOT_SIZE)
    with HostDispatcher(layout, {"echo": echo}) as dispatcher:
        client = dispatcher.client()
        samples = common.timed_calls(client.call, payload, 300)  # past the ring's 256 slots
        assert samples.shape == (300,) and (samples > 0).all()  # microseconds each
        gapped = common.timed_calls(client.call, payload, 20, np.full(20, 1000))
        assert gapped.shape == (20,)
        with pytest.raises(RuntimeError, match="echo: wrong answer: status 0, 32 bytes"):
            common.timed_calls(client.call, payload, 1, expected=payload[::-1])
        with pytest.raises(RuntimeError, match="increment: wrong answer: status "):
            common.timed_calls(client.call, payload, 1, name="increment")  # not served


def test_a_graph_case_is_timed_on_its_ring_and_checked_against_its_answer() -> None:
    """bench/graph.py's rows on a ring of its shape: every row (floors included) answers each
    byte plus one, and an answer of another kind stops the run; the goals pair each row with
    its floor round by round."""
    import argparse

    from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher, echo, rpc_increment
    from skbuild_cudaq.realtime.ring import RingLayout

    np = pytest.importorskip("numpy")
    graph = load_bench("graph")
    layout = RingLayout(graph.NUM_SLOTS, graph.SLOT_SIZE)
    options = argparse.Namespace(warmup=5, repeats=40)
    handlers = {"floor": rpc_increment, "rpc_increment": rpc_increment, "two_kernels": echo}
    with HostDispatcher(layout, handlers) as dispatcher:
        client = dispatcher.client()
        for case in ("floor", "rpc_increment"):
            found = graph.measure(client, case, options)
            assert len(found) == 40 and (found > 0).all()
        with pytest.raises(RuntimeError, match="two_kernels: wrong answer: status 0, 8 bytes"):
            graph.measure(client, "two_kernels", options)
    rows = {row for g in graph.GOALS.values() for row in g[:2]} | set(graph.P99_ROWS)
    rounds = [{row: np.full(10, 10.0 + i) for row in rows} for i in range(3)]
    for row in ("graph_two_kernels", "host_graph_two_kernels"):
        rounds[1][row] = np.r_[np.full(9, 30.0), 200.0]  # one slow round, one long tail
    cases, goals = graph.summarise(rounds)
    assert cases["graph_two_kernels"]["round_p50"] == [10.0, 30.0, 12.0]
    assert goals["graph_two_kernels_p50_over_floor"]["value"] == 1.0  # the median round
    assert goals["graph_two_kernels_p50_over_floor"]["met"]
    tail = goals["graph_p99_over_p50"]
    assert tail["row"] in ("graph_two_kernels", "host_graph_two_kernels") and not tail["met"]


def test_a_floor_kernel_gets_the_ring_in_the_native_clients_layout() -> None:
    """``ring_pointers``: what floors.cu's and graph.cu's floors take (rx and tx slots, rx and
    tx flags, num_slots, slot_size), where bench/loadgen.c writes and reads them."""
    from types import SimpleNamespace

    from skbuild_cudaq.realtime.ring import RingLayout

    common = load_bench("common", needs_numpy=False)
    bridge = SimpleNamespace(device_ring=0x7F0000, layout=RingLayout(256, 128))
    slots = 256 * 128  # loadgen.c's ring_of(): rx, tx, rx flags, tx flags, in this order
    expected = (0x7F0000, 0x7F0000 + slots, 0x7F0000 + 2 * slots, 0x7F0000 + 2 * slots + 4 * 256)
    assert common.ring_pointers(bridge) == (*expected, 256, 128)


# --- the native client against a ring answered on the host ---------------------------------


@pytest.fixture(scope="module")
def loadgen(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler to build bench/loadgen.c")
    common = load_bench("common")
    return common, common.build_loadgen(tmp_path_factory.mktemp("loadgen"))


@pytest.fixture
def served_ring(loadgen: Any) -> Iterator[tuple[Any, int, list[int]]]:
    """A ring of the benchmarks' layout in process memory, echoed by a RingServer thread."""
    from skbuild_cudaq.realtime.ring import RingLayout, RingServer

    common, so = loadgen
    layout = RingLayout(common.NUM_SLOTS, common.SLOT_SIZE)
    memory = ctypes.create_string_buffer(layout.total_bytes)
    server = RingServer(memory, layout)
    stop, answered = threading.Event(), [0]

    def serve() -> None:
        while not stop.is_set():
            request = server.poll()
            if request is None:
                time.sleep(0)
                continue
            server.publish(0, request.args)
            answered[0] += 1

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield common.LoadGen(so), ctypes.addressof(memory), answered
    finally:
        stop.set()
        thread.join()
        server.close()


def test_back_to_back_random_arrival_and_throughput_are_answered_in_order(
    loadgen: Any, served_ring: tuple[Any, int, list[int]]
) -> None:
    from skbuild_cudaq.realtime.wire import function_id

    gen, ring, answered = served_ring
    echo = function_id("echo")
    assert gen.latency(ring, echo, 100).shape == (100,)
    assert gen.next.value == 100  # the ring's position, carried to the next call
    gapped = gen.latency(ring, echo, 200, gap_ns=2000)
    assert gen.next.value == 300 and (gapped > 0).all()  # past the ring's 256 slots
    assert gen.throughput(ring, echo, 600, 8) > 0
    assert gen.next.value == 900 and answered[0] == 900


def test_a_wrong_answer_stops_the_client(loadgen: Any) -> None:
    """The client checks each response (magic, status, length, request id echoed)."""
    from skbuild_cudaq.realtime.ring import RingLayout, RingServer
    from skbuild_cudaq.realtime.wire import function_id

    common, so = loadgen
    layout = RingLayout(common.NUM_SLOTS, common.SLOT_SIZE)
    memory = ctypes.create_string_buffer(layout.total_bytes)
    server = RingServer(memory, layout)

    def serve_one_wrong() -> None:
        while (request := server.poll()) is None:
            time.sleep(0)
        server.publish(5, request.args)  # status 5: not what an echo answers

    thread = threading.Thread(target=serve_one_wrong)
    thread.start()
    with pytest.raises(RuntimeError, match=r"lg_latency failed \(-2\) at request 1"):
        common.LoadGen(so).latency(ctypes.addressof(memory), function_id("echo"), 1, gap_ns=1000)
    thread.join()
    server.close()


@pytest.mark.toolchain
def test_the_floors_compile(nvcc: Path, tmp_path: Path) -> None:
    """``bench/floors.cu`` builds for the GPUs the benchmarks run on (nvcc, no GPU)."""
    common = load_bench("common")
    for arch in ("80", "90"):
        cubin = common.build_floors(tmp_path, arch)
        assert b"pingpong_floor" in cubin.read_bytes() and b"warp_floor" in cubin.read_bytes()


def test_bench_stays_small() -> None:
    """The suite's size (issue 41: bench/ at most 15 files and 3,000 lines besides its results,
    bench/results/ at most 15 files and 1 MB; issue 56 item 8 added udp_flood.py and issue 53
    python_device.py, a question each: 3,600 lines; issue 55 the graph floors and where the
    graph path's time goes: 3,850)."""
    files = [p for p in BENCH.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    results = [p for p in files if "results" in p.relative_to(BENCH).parts]
    tracked = subprocess.run(
        ["git", "ls-files", "bench"], cwd=BENCH.parent, capture_output=True, text=True, check=False
    ).stdout.split()
    code = [p for p in files if p not in results and str(p.relative_to(BENCH.parent)) in tracked]
    assert len(code) <= 15 and sum(len(p.read_text().splitlines()) for p in code) <= 3850
    kept = [p for p in results if str(p.relative_to(BENCH.parent)) in tracked]
    assert len(kept) <= 15 and sum(p.stat().st_size for p in kept) <= 1_000_000


def test_wire_starts_the_test_server_outside_the_source_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/wire.py's UDP rows run ``python -m skbuild_cudaq.cli.server``; started in
    a checkout's root, ``-m`` imported the source tree (no compiled ``_native``) rather than
    the package as installed, and the server died before its READY line."""
    import argparse

    wire = load_bench("wire")
    started: dict[str, Any] = {}

    class Started(Exception):
        pass

    def popen(cmd: list[str], **kw: Any) -> None:
        started.update(kw, cmd=cmd)
        raise Started

    monkeypatch.setattr(wire.subprocess, "Popen", popen)
    monkeypatch.chdir(BENCH.parent)
    module = tmp_path / "wire_handlers.so"
    a = argparse.Namespace(samples=10, warmup=1, pipelined=10)
    with pytest.raises(Started):
        wire.udp_server(tmp_path / "wire_floor", module, ["--path=host"], a)
    assert started["cmd"][1:3] == ["-m", "skbuild_cudaq.cli.server"]
    assert Path(started["cwd"]) == tmp_path
    assert str(BENCH.parent) not in started["env"]["PYTHONPATH"].split(":")


def test_wire_goals_are_the_issues_keys_judged_on_paired_rounds() -> None:
    """bench/wire.py's summary: exactly the five goal keys of wire.json (the device one only
    where it was measured), each a row's p50 over its floor's in the same round (median over
    rounds), p99 <= 2x p50 per row, throughput against the floor."""
    import argparse

    wire = load_bench("wire")

    def rounds(*p50: float, p99: float = 0.0, rps: float = 1.0) -> list[dict[str, float]]:
        return [{"p50_us": v, "p90_us": v, "p99_us": p99 or 1.5 * v, "rps": rps} for v in p50]

    per_round = {
        "udp_echo_floor": rounds(10.0, 12.0, 11.0, rps=100.0),
        "udp_host_native": rounds(11.0, 13.0, 12.0, rps=80.0),
        "udp_host_python": rounds(16.0, 19.0, 17.0, p99=40.0),
        "ring_floor": rounds(0.2, 0.3, 0.25),
        "host_native": rounds(0.25, 0.33, 0.3),
        "host_python": rounds(2.5, 3.5, 2.9),
        "host_python_c_client": rounds(0.4, 0.5, 0.45),
        "host_native_python_client": rounds(0.6, 0.7, 0.65),
    }
    ns = argparse.Namespace(rounds=3, samples=10, warmup=1, pipelined=10)
    why = {"udp_device_p50_over_floor": "no GPU"}
    out = wire.summarize(per_round, why, ns)
    assert list(out["goals"]) == [
        "udp_host_native_p50_over_floor", "udp_host_python_p50_over_floor",
        "host_native_p50_over_floor", "host_python_p50_us",
    ]  # fmt: skip
    goals = out["goals"]
    assert goals["udp_host_native_p50_over_floor"] == {
        "value": pytest.approx(12 / 11, abs=1e-4), "goal": "<= 1.2", "met": True,
    }  # fmt: skip
    assert goals["udp_host_python_p50_over_floor"]["value"] == pytest.approx(1.5833, abs=1e-4)
    assert not goals["udp_host_python_p50_over_floor"]["met"]
    assert goals["host_native_p50_over_floor"]["value"] == pytest.approx(1.2, abs=1e-4)
    assert goals["host_python_p50_us"] == {"value": 2.9, "goal": "<= 3.0", "met": True}
    assert out["left_out"] == why
    latency = out["latency"]
    assert latency["udp_host_python"]["p99_met"] is False  # 40 > 2 x 17
    assert latency["udp_host_native"]["p99_met"] is True
    assert latency["host_python"]["floor"] == "ring_floor"
    assert out["throughput"]["udp_host_native"]["over_floor"] == pytest.approx(0.8)
    assert out["breakdown_us"]["ring: both (host_python - host_native)"] == pytest.approx(2.6)
