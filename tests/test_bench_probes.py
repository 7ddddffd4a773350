"""The benchmarks' derived probes and generated kernels, without a GPU.

``bench/phases.py`` derives some probes from example_app's kernel sources at build time
(``DERIVED``: the kernel renamed, one call replaced, globals renamed), so that each stays the
example but for what it varies; ``bench/issue_rate.py`` generates floors with added work. A
change to an example that the derivation no longer matches must stop the benchmark with a
message naming what to update, not measure something else; and the generated sources must
compile. (The round trips themselves are GPU work: ``tools/gpu-check.sh``.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _bench import load_bench

BENCH = Path(__file__).resolve().parent.parent / "bench"
INCLUDE = Path(__file__).resolve().parent.parent / "skbuild_cudaq" / "include"


def test_each_derived_probe_is_its_example_renamed_with_its_changes() -> None:
    phases = load_bench("phases")
    assert phases.DERIVED, "no derived probes to check"
    for kernel, (source, _, _, example_kernel, replacements, renames) in phases.DERIVED.items():
        text = phases.derived_source(kernel)
        example = (phases.EXAMPLE / source).read_text(encoding="utf-8")
        assert f'extern "C" __global__ void {kernel}(' in text
        assert f"void {example_kernel}(" not in text  # renamed, or two kernels of one name

        def renamed(part: str, renames: dict[str, str] = renames) -> str:
            for before, after in renames.items():
                part = part.replace(before, after)
            return part

        for before, after in replacements:
            # each text to replace is gone but where a replacement (re)inserts it (a move)
            old, new = renamed(before), renamed(after)
            moved = sum(renamed(n).count(old) for _, n in replacements)
            assert text.count(old) == moved, (kernel, old)
            assert new in text, (kernel, new)
        for old in renames:
            assert old not in text, (kernel, old)
        # everything else is the example's: same number of lines but for what was changed
        # and the helpers the probes call
        helpers = phases._DIRECT_ECHO
        assert helpers in text
        lines = len(text.replace(helpers, "").splitlines())
        assert abs(lines - len(example.splitlines())) < 12, kernel


def test_direct_call_probes_call_the_handler_by_name() -> None:
    phases = load_bench("phases")
    direct = [k for k in phases.DERIVED if k.endswith("_direct_dispatcher")]
    assert direct
    for kernel in direct:
        text = phases.derived_source(kernel)
        assert "cudaq_bench_direct_echo(request, response, max_result, &result_len)" in text
        assert "cudaq_call_handler(" not in text.split(f"void {kernel}(", 1)[1]


def test_launch_pointer_probes_are_the_examples_without_the_launch_wide_switch() -> None:
    """Each ``*_launch_pointer`` probe calls its launch-wide handlers as the example did before
    the launch-wide switch (cudaq_call_handler: the thread-shaped switch, then the pointer);
    the examples call cudaq_call_launch_handler (the module's launch-wide switch)."""
    phases = load_bench("phases")
    probes = sorted(k for k in phases.DERIVED if k.endswith("_launch_pointer_dispatcher"))
    assert probes == [
        "cluster_launch_pointer_dispatcher",
        "coop_launch_pointer_dispatcher",
        "single_thread_launch_pointer_dispatcher",
    ]
    for kernel in probes:
        source = phases.DERIVED[kernel][0]
        example = (phases.EXAMPLE / source).read_text(encoding="utf-8")
        body = phases.derived_source(kernel).split(f"void {kernel}(", 1)[1]
        assert "cudaq_call_launch_handler(" in example
        assert "cudaq_call_launch_handler(" not in body
        # the call the launch-wide one was: cudaq_call_handler, for handlers of either shape
        (old, new), *_ = phases.DERIVED[kernel][4]
        assert "cudaq_call_launch_handler(" in old and example.count(old) == 1
        assert new.count("cudaq_call_handler(") == 1 and new in body


def test_single_thread_example_computes_max_result_first_and_the_probe_late() -> None:
    phases = load_bench("phases")
    max_line = "const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;"
    check = "if (threadIdx.x != 0 || blockIdx.x != 0)"
    example = (phases.EXAMPLE / "single_thread_dispatcher.cu").read_text(encoding="utf-8")
    assert example.index(max_line) < example.index(check)
    late = phases.derived_source("single_thread_late_max_dispatcher")
    assert late.count(max_line) == 1
    assert late.index(max_line) > late.index("if (session == nullptr)") > late.index(check)


def test_a_derivation_that_no_longer_matches_stops_with_what_to_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    phases = load_bench("phases")
    kernel = "cluster_direct_dispatcher"
    source, *_, replacements, _ = phases.DERIVED[kernel]
    needle = replacements[0][0]  # the example's call the probe replaces
    text = (phases.EXAMPLE / source).read_text(encoding="utf-8")
    assert text.count(needle) == 1
    changed = text.replace(needle, needle.replace("request, response", "request,  response"))
    (tmp_path / source).write_text(changed, encoding="utf-8")
    monkeypatch.setattr(phases, "EXAMPLE", tmp_path)
    with pytest.raises(SystemExit, match=r"cluster_dispatcher\.cu has not one .*update DERIVED"):
        phases.derived_source(kernel)


@pytest.mark.toolchain
def test_derived_probes_compile(nvcc: Path, tmp_path: Path) -> None:
    phases = load_bench("phases")
    for kernel, (_, arch, *_rest) in phases.DERIVED.items():
        src = tmp_path / f"{kernel}.cu"
        src.write_text(phases.derived_source(kernel), encoding="utf-8")
        cmd = [str(nvcc), "-fatbin", "-rdc=true", "-std=c++17", f"-I{INCLUDE}"]
        cmd += [f"-gencode=arch=compute_{arch},code=lto_{arch}", "-o", str(tmp_path / "x.fatbin")]
        done = subprocess.run([*cmd, str(src)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{kernel}:\n{done.stderr}"


def test_each_choice_probe_is_a_derived_single_thread_probe() -> None:
    """The probes served with the naive handler and the launch-wide echo (CHOICE_PROBES) are
    DERIVED's single-thread kernels, so that a renamed probe stops the benchmark here."""
    phases = load_bench("phases")
    for probe in phases.CHOICE_PROBES:
        assert phases.DERIVED[f"{probe}_dispatcher"][2] == "single_thread", probe


def test_own_module_switch_holds_example_apps_handlers_and_the_naive_one_alone(
    tmp_path: Path,
) -> None:
    """The naive-handler goal's second module is a user's: example_app's handlers and the
    naive handler (the same text as FLOOR_CU's), none of FLOOR_CU's other probes."""
    phases = load_bench("phases")
    from skbuild_cudaq.build._handler_switch import exported_handlers

    sources = phases.own_module_sources(tmp_path)
    names = [src.name for src, _ in sources]
    assert names.count("single_thread_dispatcher.cu") == 1
    assert "floor_phases.cu" not in names
    for probe in phases.THREAD_ONLY_PROBES:  # the example for thread-shaped handlers alone
        assert f"{probe}.cu" in names, probe
    assert phases.NAIVE_HANDLER_CU in phases.FLOOR_CU
    switch = (tmp_path / "handler_switch.cu").read_text(encoding="utf-8")
    called = set(exported_handlers(phases.FLOOR_CU)) - {"naive_echo_thread"}
    assert called  # FLOOR_CU's other probes: in the probe module's switch, not in this one
    for probe in called:
        assert f"cudaq_handler_{probe}" not in switch, probe
    for handler in ("echo_thread", "rpc_increment_thread", "naive_echo_thread", "echo"):
        assert f"handler == cudaq_handler_{handler})" in switch, handler
    labels = [label for label, *_ in phases.OWN_MODULE_PAIRS]
    assert labels[0] == "single_thread:naive_echo_thread@own_module"


@pytest.mark.toolchain
def test_own_module_links_with_the_single_thread_kernel(nvcc: Path, tmp_path: Path) -> None:
    pytest.importorskip("cuda.bindings.nvjitlink", reason="nvJitLink (the runtime extra)")
    phases = load_bench("phases")
    inputs = phases.compile_lto(
        str(nvcc), tmp_path, phases.own_module_sources(tmp_path), stamps=False
    )
    cubin = phases.nvjitlink_link(inputs, "90")
    kernels = ["single_thread_dispatcher", *(f"{p}_dispatcher" for p in phases.THREAD_ONLY_PROBES)]
    for name in kernels:  # every kernel the own module's pairs serve
        assert name.encode() in cubin, name
    assert b"cudaq_handler_naive_echo_thread" in cubin  # the export the run time reads


@pytest.mark.toolchain
def test_issue_rate_kernels_compile_with_their_work(nvcc: Path, tmp_path: Path) -> None:
    issue_rate = load_bench("issue_rate")
    text = issue_rate.source()
    names = [name for name, _, _ in issue_rate.kernels()]
    assert len(names) == 2 * len(issue_rate.WORK)
    for name, work, unrolled in issue_rate.kernels():
        assert f"void {name}(" in text
        assert ("unrolled" in name) == unrolled and str(work) in name
    src = tmp_path / "issue_rate.cu"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "issue_rate.ptx"
    done = subprocess.run(
        [str(nvcc), "-ptx", "-arch=sm_90", "-O3", "-o", str(out), str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ptx = out.read_text(encoding="utf-8")
    for name in names:
        assert f".entry {name}(" in ptx


@pytest.mark.toolchain
def test_shape_floors_compile_for_sm90(nvcc: Path, tmp_path: Path) -> None:
    shape_floors = load_bench("shape_floors")
    src = tmp_path / "shape_floors.cu"
    src.write_text(shape_floors.source(), encoding="utf-8")
    out = tmp_path / "shape_floors.ptx"
    done = subprocess.run(
        [str(nvcc), "-ptx", "-arch=sm_90", "-O3", "-std=c++17", "-o", str(out), str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ptx = out.read_text(encoding="utf-8")
    for name in shape_floors.KERNELS:
        assert f".entry {shape_floors.symbol(name)}(" in ptx
    assert "barrier.cluster.arrive.release" in ptx  # the split barriers survived
    # the one-way hand-off's remote arrive and cluster-scope wait
    assert "mbarrier.arrive.release.cluster.shared::cluster.b64" in ptx
    assert "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64" in ptx
    # the pollers' hand-off to the server: a CTA-scope release and acquire on shared memory
    assert "red.release.cta.shared.max.u32" in ptx and "ld.acquire.cta.shared.u32" in ptx


def test_shape_floors_measure_the_examples_hand_offs_first_and_refuse_unknown_floors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The goals are judged by the examples' hand-offs: those run first, before designs that
    may misbehave on a GPU (a floor that never exits stops the run). An unknown floor is a
    usage error before anything touches CUDA."""
    shape_floors = load_bench("shape_floors")
    names = list(shape_floors.KERNELS)
    assert names[:2] == ["cluster_handoff_floor", "coop_handoff_floor"]
    assert set(shape_floors.KERNELS.values()) == {
        "cluster",
        "coop",
        "poll1",
        "poll2",
        "poll4",
        "poll8",
    }
    # a k-poller label launches multipoll_floor with k poller warps
    assert shape_floors.symbol("multipoll_floor@4") == "multipoll_floor"
    assert shape_floors.symbol("coop_handoff_floor") == "coop_handoff_floor"
    with pytest.raises(SystemExit) as stopped:
        shape_floors.main(["--kernels", "cluster_handoff_floor,cluster_allpoll_floor"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "cluster_allpoll_floor" in err and "cluster_handoff_floor" in err


def test_repeated_dispatch_runs_judge_each_goal_on_its_median_and_keep_the_spread() -> None:
    """``bench/dispatch.py --repeat``: a goal one run meets and the next misses (the single-
    thread ratio went 1.050, 1.082, 1.063 over three runs of session 10) is judged on the median,
    and the spread stays in the JSON."""
    dispatch = load_bench("dispatch")

    def run(date: str, ratio: float, warp: float, errors: dict[str, str]) -> dict[str, object]:
        return {
            "date": date,
            "elapsed_s": 24.0,
            "latency_us": {"table": date},
            "errors": errors,
            "goals": {
                "single_thread:thread_p50_over_floor": {
                    "value": ratio,
                    "goal": "<= 1.05",
                    "met": ratio <= 1.05,
                    "handler_shape": "thread",
                },
                "warp_parallel:thread_over_warp_floor_at_64": {
                    "value": warp,
                    "goal": ">= 0.8",
                    "met": warp >= 0.8,
                    "handler_shape": "thread",
                },
            },
        }

    runs = [
        run("a", 1.050, 0.81, {}),
        run("b", 1.082, 0.74, {"x": "boom"}),
        run("c", 1.063, 0.83, {}),
    ]
    combined = dispatch.combine_runs(runs)
    st = combined["goals"]["single_thread:thread_p50_over_floor"]
    assert st["value"] == pytest.approx(1.063)
    assert st["met"] is False and st["met_runs"] == 1
    assert (st["min"], st["max"]) == (1.050, 1.082)
    assert st["values"] == [1.050, 1.082, 1.063]
    assert st["handler_shape"] == "thread"
    warp = combined["goals"]["warp_parallel:thread_over_warp_floor_at_64"]
    assert warp["value"] == pytest.approx(0.81) and warp["met"] is True and warp["met_runs"] == 2
    assert combined["repeat"] == 3 and combined["tables_from_run"] == 3
    assert combined["latency_us"] == {"table": "c"}  # the tables are the last run's
    assert [r["date"] for r in combined["runs"]] == ["a", "b", "c"]
    assert combined["errors"] == {"run 2: x": "boom"}
    assert combined["elapsed_s"] == pytest.approx(72.0)
    assert dispatch.meets(0.8, ">= 0.8") and not dispatch.meets(1.051, "<= 1.05")
    with pytest.raises(ValueError, match="not '== 1'"):
        dispatch.meets(1.0, "== 1")


def test_a_tail_goal_carries_the_floors_own_tail_through_repeats_and_the_report() -> None:
    """The p99 / p50 goals keep the ping-pong floor's own value over the paired rounds
    (``floor_value``): ``--repeat`` takes its median, and the report shows it in a column of
    its own, to compare a row's tail with the bare kernel's on the same host."""
    dispatch = load_bench("dispatch")
    report = load_bench("report", needs_numpy=False)

    def run(tail: float, floor: float) -> dict[str, object]:
        return {
            "date": "d",
            "errors": {},
            "goals": {
                "builtin:thread_p99_over_p50": {
                    "value": tail,
                    "goal": "<= 1.25",
                    "met": tail <= 1.25,
                    "handler_shape": "thread",
                    "floor_value": floor,
                },
                "builtin:thread_p50_over_floor": {
                    "value": 1.08,
                    "goal": "<= 1.10",
                    "met": True,
                    "handler_shape": "thread",
                },
            },
        }

    combined = dispatch.combine_runs([run(1.30, 1.40), run(1.20, 1.36), run(1.29, 1.33)])
    tail = combined["goals"]["builtin:thread_p99_over_p50"]
    assert tail["value"] == pytest.approx(1.29) and tail["met"] is False
    assert tail["floor_value"] == pytest.approx(1.36)
    assert tail["floor_values"] == [1.40, 1.36, 1.33]
    assert "floor_value" not in combined["goals"]["builtin:thread_p50_over_floor"]
    lines = report._goals(combined["goals"], 3)
    header = next(line for line in lines if line.startswith("| Goal"))
    assert header.endswith("| Floor's own |")
    row = next(line for line in lines if "builtin:thread_p99_over_p50" in line)
    assert row.split("|")[-2].strip() == "1.360"
    ratio = next(line for line in lines if "builtin:thread_p50_over_floor`" in line)
    assert ratio.split("|")[-2].strip() == "—"
    # goals without a floor's value (every older file) keep the table they had
    plain = report._goals({"x": {"value": 1.0, "goal": "<= 1", "met": True}})
    assert "| Goal | Value | Target | Met |" in plain


def test_paired_ratios_cancel_a_drift_that_a_first_floor_does_not() -> None:
    """bench/dispatch.py's goals divide each round by the floor measured right before it: a
    drift over the run (the floor's p50 rose 0.27 us in a dozen seconds on a lent H200)
    cancels, where dividing by one floor measured first would not."""
    dispatch = load_bench("dispatch")
    floors = [4.30 + 0.05 * i for i in range(5)]  # the host drifts up
    values = [f * 1.07 for f in floors]  # a kernel 7 % over its floor in every round
    paired = dispatch.paired_ratio(values, floors)
    assert paired["ratio"] == pytest.approx(1.07)
    assert paired["ratios"] == pytest.approx([1.07] * 5)
    first_floor = sorted(v / floors[0] for v in values)[2]
    assert first_floor > 1.09  # what an unpaired figure would have said: 0.025 over
    with pytest.raises(ValueError, match="3 values for 2 floors"):
        dispatch.paired_ratio([1.0, 2.0, 3.0], [1.0, 2.0])


_SASS = """
\t.section\t.text.k_one,"ax",@progbits
        /*0000*/                   LDC R1, c[0x0][0x28] ;                /* 0x00000a00ff017b82 */
                                                                          /* 0x000fe40000000800 */
        /*0010*/                   LDG.E.STRONG.SYS R3, desc[UR4][R8.64] ;
        /*0020*/                   LD.E.64 R10, desc[UR4][R12.64+0x8] ;
        /*0030*/               @P0 LD.E.64 R14, desc[UR4][R12.64+0x20] ;
        /*0040*/                   LD.E.64 R16, desc[UR4][R20.64+0x10] ;
        /*0050*/                   LD.E.64 R18, desc[UR4][R12.64] ;
        /*0060*/                   BRA `(.L_x_12) ;
        /*0070*/                   LD.E.64 R18, desc[UR4][R12.64+0x30] ;
        /*0080*/                   CALL.REL.NOINC `(k_one) ;
.L_x_12:
\t.section\t.text.k_two,"ax",@progbits
        /*0000*/                   LDC R7, c[0x0][0x28] ;
        /*0010*/                   LDG.E.STRONG.SYS R2, desc[UR6][R4.64] ;
        /*0020*/                   LD.E.64 R22, desc[UR6][R24.64+0x8] ;
        /*0030*/               @P3 LD.E.64 R26, desc[UR6][R24.64+0x20] ;
        /*0040*/                   LD.E.64 R16, desc[UR6][R20.64+0x10] ;
        /*0050*/                   LD.E.64 R28, desc[UR6][R24.64] ;
        /*0060*/                   BRA `(.L_x_99) ;
        /*0070*/                   LD.E.64 R18, desc[UR6][R24.64+0x38] ;
        /*0080*/                   CALL.REL.NOINC `(k_two) ;
"""


def test_sass_listing_is_parsed_and_compared_modulo_registers_labels_and_names() -> None:
    sass = load_bench("sass")
    kernels = sass.parse(_SASS)
    assert sorted(kernels) == ["k_one", "k_two"]
    assert [i.offset for i in kernels["k_one"]] == list(range(0, 0x90, 0x10))
    assert kernels["k_one"][0].text == "LDC R1, c[0x0][0x28]"  # -hex encodings dropped
    # the request's loads: off the first load's base, after the acquire, up to a branch
    assert sass.request_loads(kernels["k_one"]) == [8, 32, 0]
    a = sass.normalize(kernels["k_one"], "k_one")
    b = sass.normalize(kernels["k_two"], "k_two")
    assert a[:7] == b[:7]  # registers, predicates, labels and the names set aside
    assert sass.differing(a, b) == 2  # +0x30 against +0x38: one line each way
    assert sass.differing(a, a) == 0
    assert sass.request_loads(sass.parse("\t.section\t.text.k,\n  /*0000*/ EXIT ;\n")["k"]) == []


_HOT = """
\t.section\t.text.k_loop,"ax",@progbits
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   LDS R4, [R2] ;
        /*0020*/                   LDG.E.STRONG.SYS R3, desc[UR4][R8.64] ;
        /*0030*/                   ISETP.NE.AND P0, PT, R3, R5, PT ;
        /*0040*/              @!P0 BRA `(.L_x_2) ;
        /*0050*/                   NANOSLEEP 0x20 ;
        /*0060*/                   YIELD ;
        /*0070*/                   BRA `(.L_x_1) ;
.L_x_2:
        /*0080*/                   IMAD.WIDE.U32 R12, R3, 0x40, R6 ;
        /*0090*/                   LDG.E.64 R10, desc[UR4][R12.64+0x8] ;
        /*00a0*/                   LDG.E.64 R14, desc[UR4][R12.64] ;
        /*00b0*/               @P1 EXIT ;
        /*00c0*/                   STG.E.64 desc[UR4][R16.64], R10 ;
        /*00d0*/                   MEMBAR.ALL.SYS ;
        /*00e0*/                   STG.E.STRONG.SYS desc[UR4][R18.64], R3 ;
        /*00f0*/                   IADD3 R5, R5, 0x1, RZ ;
        /*0100*/                   BRA `(.L_x_1) ;
        /*0110*/                   EXIT ;
"""


def test_sass_hot_path_follows_the_control_flow_from_publish_and_from_the_acquire() -> None:
    sass = load_bench("sass")
    kernels = sass.parse(_HOT)
    loop = kernels["k_loop"]
    assert loop[1].labels == (".L_x_1",) and loop[8].labels == (".L_x_2",)
    assert sass.request_loads(loop) == [8, 0]
    hot = sass.hot_path(loop)
    # publish -> poll: the increment, the jump back, the shared load, then the acquire
    assert hot["publish_to_poll"] == ["IADD3", "BRA", "LDS"]
    # the hit path takes the branch over the miss path (NANOSLEEP/YIELD/BRA laid out between)
    assert hot["acquire_to_first_request_load"] == 4
    assert hot["acquire_to_last_request_load"] == 5
    # no publish, no poll: nothing to report
    bare = sass.hot_path(sass.parse("\t.section\t.text.k,\n  /*0000*/ EXIT ;\n")["k"])
    assert bare == dict.fromkeys(
        ("publish_to_poll", "acquire_to_first_request_load", "acquire_to_last_request_load")
    )


@pytest.mark.toolchain
def test_single_thread_example_issues_the_request_loads_as_variant_aligned(
    nvcc: Path, tmp_path: Path
) -> None:
    """The one change of session 9 to the single-thread example (max_result first) is there
    to make nvcc issue the poll's loads as in variant_aligned, measured 0.12 us faster."""
    sass = load_bench("sass")
    nvdisasm = sass.find_nvdisasm()
    if nvdisasm is None:
        pytest.skip("no nvdisasm (the test extra installs nvidia-cuda-nvdisasm)")
    out = tmp_path / "sass.json"
    assert sass.main(["--out", str(out), "--nvdisasm", nvdisasm]) == 0
    results = json.loads(out.read_text())
    pairs = {(p["kernel"], p["reference"]): p for p in results["pairs"]}
    example = pairs[("single_thread_dispatcher", "variant_aligned_copy")]
    assert example["same_request_load_order"], results["kernels"]["single_thread_dispatcher"]
    assert len(results["kernels"]["single_thread_dispatcher"]["request_loads"]) == 32
    hot = results["hot_path"]
    assert set(hot) == set(sass.HOT_PATH_KERNELS)
    for name in sass.HOT_PATH_KERNELS:  # every one-thread kernel publishes, polls and loads
        assert hot[name]["publish_to_poll"] is not None, name
        assert hot[name]["acquire_to_first_request_load"] > 0, name
        assert (
            hot[name]["acquire_to_first_request_load"] < hot[name]["acquire_to_last_request_load"]
        ), name
    # the controls: the same code under two names, the same source compiled twice
    assert pairs[("variant_aligned_copy", "variant_aligned")]["differing_lines"] == 0
    assert (
        pairs[("single_thread_rebuilt_dispatcher", "single_thread_dispatcher")]["differing_lines"]
        == 0
    )


_INTERRUPTS = """\
           CPU0       CPU1       CPU2
  0:         31          0          0   IO-APIC    2-edge      timer
 24:          5        100          7   PCI-MSI 1-edge      nvidia
LOC:       1000       2000       3000   Local timer interrupts
ERR:          4
MIS:          0
"""


def test_host_cpu_reads_interrupts_clocks_and_what_to_pin() -> None:
    host_cpu = load_bench("host_cpu")
    # every source summed a CPU; the one-column rows (ERR, MIS) count for none
    assert host_cpu.interrupts(_INTERRUPTS) == {0: 1036, 1: 2100, 2: 3007}
    assert host_cpu.interrupts("") == {}
    cpuinfo = "processor\t: 0\ncpu MHz\t\t: 2100.5\n\nprocessor\t: 1\ncpu MHz\t\t: 3400.000\n"
    assert host_cpu.cpu_mhz(cpuinfo) == {0: 2100.5, 1: 3400.0}
    assert host_cpu.cpu_mhz("processor\t: 0\nmodel name\t: x\n") == {}  # no clock shown
    assert host_cpu.configurations([1, 3], 1) == ["any", "1", "3", "all@1"]
    assert host_cpu.configurations([2], None) == ["any", "2"]


def test_host_cpu_summary_pairs_each_round_then_takes_the_median() -> None:
    host_cpu = load_bench("host_cpu")

    def one(native: float, call: float, extra: float) -> dict[str, object]:
        return {
            "native": native,
            "call": call + extra,
            "native_random": native - 0.3,
            "call_random": call,
            "interrupts_on_cpu": 80,
            "ran_on": [1],
        }

    passes = [one(4.0, 4.3, 0.0), one(4.5, 4.6, 0.1), one(4.2, 4.9, 0.0)]
    row = host_cpu.summarize({"1": passes})["1"]
    # per round: random 0.6, 0.4, 1.0 over native; the median of the differences (0.6),
    # not the difference of the medians (4.6 - 3.9 = 0.7)
    assert row["over_native_random_each_round"] == [0.6, 0.4, 1.0]
    assert row["call_over_native_random"] == pytest.approx(0.6)
    assert row["call_over_native"] == pytest.approx(0.3)
    assert row["interrupts_on_cpu"] == 80 and "ran_on" not in row


def test_python_host_puts_client_and_consumer_on_cpus_of_their_own() -> None:
    python_host = load_bench("python_host")
    assert python_host.cpus_for({0, 1, 2, 3}) == (1, 2)  # CPU 0 left to interrupts
    assert python_host.cpus_for({0, 1}) == (0, 1)
    assert python_host.cpus_for({5}) == (None, None)


def _trials(offsets: list[float], noise: list[list[float]]) -> list[dict[str, Any]]:
    """bench/placement.py's trials: every measured kernel ``offset + noise`` over its floor."""
    placement = load_bench("placement")
    return [
        {
            "kernels": {
                label: {
                    "rounds": [
                        {
                            "floor_p50": 4.0,
                            "p50": 4.2 + o + e,
                            "floor_gap_p50": 3.9,
                            "gap_p50": 4.1 + e,
                        }
                        for e in row
                    ]
                }
                for label, *_ in placement.MEASURED
            }
        }
        for o, row in zip(offsets, noise, strict=True)
    ]


def test_placement_analysis_of_variance_tells_placement_from_round_noise() -> None:
    placement = load_bench("placement")
    noise = [[0.01, -0.01], [-0.02, 0.02], [0.015, -0.015], [0.0, 0.01]]
    label = placement.MEASURED[1][0]
    # no placement effect: the trials differ as little as their rounds do
    flat = placement.summarize(_trials([0.0] * 4, noise))[label]
    # a placement effect of 0.1 us between trials
    moved = placement.summarize(_trials([0.0, 0.1, 0.0, 0.1], noise))[label]
    assert flat["back_to_back"]["f_ratio"] < 1.0
    assert flat["back_to_back"]["placement_sd_us"] == 0.0
    assert moved["back_to_back"]["f_ratio"] > 10  # 18.7 for these numbers
    assert 0.04 < moved["back_to_back"]["placement_sd_us"] < 0.07  # 0.1 us apart: sd ~0.058
    assert moved["back_to_back"]["min"] == pytest.approx(0.2)
    assert moved["back_to_back"]["max"] == pytest.approx(0.3, abs=0.02)
    # random arrival had no offset: the same verdict as flat
    assert moved["random_arrival"]["placement_sd_us"] == 0.0
    assert flat["back_to_back"]["median_spread_within_trial"] == pytest.approx(0.025)


@pytest.mark.toolchain
def test_placement_module_and_spacers_build(nvcc: Path, tmp_path: Path) -> None:
    """The measured module links with every kernel the benchmark serves, and each spacer
    kernel has the code size the benchmark counts (SPACER_BYTES)."""
    elftools = pytest.importorskip("elftools.elf.elffile")
    placement = load_bench("placement")
    module, spacer = placement.build(str(nvcc), tmp_path, "90")

    def text_sizes(blob: bytes) -> dict[str, int]:
        import io

        elf = elftools.ELFFile(io.BytesIO(blob))
        return {
            s.name.removeprefix(".text."): s["sh_size"]
            for s in elf.iter_sections()
            if s.name.startswith(".text.")
        }

    kernels = text_sizes(module)
    for _, kernel, _, _ in placement.MEASURED:
        assert kernel in kernels, kernel
    sizes = text_sizes(spacer)
    assert [sizes[f"spacer_{i}"] for i in range(placement.SPACER_KERNELS)] == list(
        placement.SPACER_BYTES
    )


def test_across_runs_counts_each_run_of_a_paired_row_against_issue_12s_lines(
    tmp_path: Path,
) -> None:
    """The performance page follows the one-thread ladder over every ``phases_nostamps`` file
    kept (``bench/results/`` and ``history/``): each run's paired ratio is the median over its
    rounds of the row's p50 over its floor round's, and the table counts the runs at or under
    1.05 (and, for the naive handler, 0.1 us over its floor)."""
    report = load_bench("report", needs_numpy=False)

    def run(date: str, ratios: list[float], naive_us: float) -> dict[str, object]:
        rounds = [
            {"floor_p50": 4.0, "p50": 4.0 * r, "floor_gap_p50": 3.8, "gap_p50": 3.8 * r}
            for r in ratios
        ]
        return {
            "benchmark": "phases",
            "date": date,
            "config": {"stamps": False},
            "paired": {
                "ladder_switch_id_three:echo_thread": {
                    "floor": "pingpong_floor",
                    "over_floor_us": 0.2,
                    "rounds": rounds,
                },
                "single_thread:naive_echo_thread": {
                    "floor": "naive_floor",
                    "over_floor_us": naive_us,
                    "over_floor_random_arrival_us": naive_us / 2,
                    "rounds": rounds,
                },
            },
        }

    (tmp_path / "history").mkdir()
    files = {
        tmp_path / "phases_nostamps.json": run("2026-12-04", [1.04, 1.06, 1.045], 0.08),
        tmp_path / "history" / "a.json": run("2026-12-01", [1.07, 1.06, 1.08], 0.15),
        tmp_path / "history" / "b.json": run("2026-12-02", [1.05, 1.05, 1.10], 0.12),
        # the current file's copy in history/: the same run, counted once
        tmp_path / "history" / "c.json": run("2026-12-04", [1.04, 1.06, 1.045], 0.08),
    }
    for path, data in files.items():
        path.write_text(json.dumps(data), encoding="utf-8")
    results = report.load_results(tmp_path)
    assert results.by_benchmark["phases_nostamps"][0] == tmp_path / "phases_nostamps.json"
    assert len(results.runs["phases_nostamps"]) == 4
    entry = files[tmp_path / "history" / "a.json"]["paired"]  # type: ignore[index]
    one = entry["ladder_switch_id_three:echo_thread"]
    assert report.paired_run_ratio(one) == pytest.approx(1.07)
    assert report.paired_run_ratio(one, random_arrival=True) == pytest.approx(1.07)
    assert report.paired_run_ratio({"rounds": []}) is None
    lines = report.across_runs_lines(results.runs["phases_nostamps"])
    ladder = next(line for line in lines if "`ladder_switch_id_three:echo_thread`" in line)
    cells = [c.strip() for c in ladder.split("|")[1:-1]]
    # runs, median, range, runs <= 1.05: per-run medians 1.045, 1.07, 1.05
    assert cells[2:6] == ["3", "1.050", "1.045-1.070", "2 of 3"]
    naive = next(line for line in lines if "`single_thread:naive_echo_thread`" in line)
    cells = [c.strip() for c in naive.split("|")[1:-1]]
    assert cells[2:7] == ["3", "0.120", "0.080-0.150", "1 of 3", "0.060"]
    # rows no run measured are left out, and no run at all gives no section
    assert not any("ladder_bridge" in line for line in lines)
    assert report.across_runs_lines([]) == []
    assert "(3 runs of `bench/phases.py --no-stamps`" in "".join(lines)
    page, _ = report.render(results, tmp_path / "performance.md", tmp_path, draw=False)
    assert "### Across runs: the one-thread ladder against issue #12's lines" in page
