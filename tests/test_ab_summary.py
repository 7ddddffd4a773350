"""``bench/ab_summary.py``, the verdict of ``tools/variant-ab.sh``, without a GPU: passes written
as ``bench/dispatch.py`` writes its goals, and the page ``bench/report.py`` makes of a summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _bench import load_bench

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


ab = load_bench("ab_summary", needs_numpy=False)


def _write_passes(directory: Path, name: str, rows: dict[str, tuple[str, list[float]]]) -> None:
    """One ``ab-<pass>-<label>.json`` per pass (base first, alternated), goals as given."""
    directory.mkdir(parents=True, exist_ok=True)
    count = len(next(iter(rows.values()))[1])
    for index in range(count):
        label = "base" if index % 2 == 0 else name
        goals = {
            key: {"value": values[index], "goal": target, "met": False}
            for key, (target, values) in rows.items()
        }
        data = {
            "benchmark": "dispatch",
            "date": f"2026-12-02T10:0{index}:00+00:00",
            "device": "NVIDIA H200",
            "compute_capability": "9.0",
            "versions": {"nvidia_driver": "580.159.04"},
            "goals": goals,
        }
        (directory / f"ab-{index + 1}-{label}.json").write_text(json.dumps(data))


def test_each_goal_is_judged_by_every_base_pass_next_to_a_patched_one(tmp_path: Path) -> None:
    _write_passes(
        tmp_path,
        "v",
        {
            # lower is better: the patch wins all four comparisons (1-2, 2-3, 3-4, 4-5)
            "latency": ("<= 1.05", [1.07, 1.05, 1.08, 1.06, 1.07]),
            # higher is better: the patch loses every comparison
            "rate": (">= 0.8", [0.82, 0.80, 0.83, 0.79, 0.82]),
            # wins next to one base pass, loses next to the other
            "noisy": ("<= 1.1", [1.09, 1.10, 1.12, 1.11, 1.08]),
        },
    )
    summary = ab.summarize(ab.load_passes(tmp_path))
    goals = summary["goals"]
    assert summary["variant"] == "v" and summary["patch"] == "bench/variants/v.patch"
    assert [p["label"] for p in summary["passes"]] == ["base", "v", "base", "v", "base"]
    assert goals["latency"]["verdict"] == "better" and goals["latency"]["patched_wins"] == 4
    assert goals["latency"]["comparisons"] == 4
    assert goals["latency"]["base"] == [1.07, 1.08, 1.07] and goals["latency"]["v"] == [1.05, 1.06]
    assert goals["rate"]["verdict"] == "worse" and goals["rate"]["patched_wins"] == 0
    assert goals["noisy"]["verdict"] == "mixed" and goals["noisy"]["patched_wins"] == 2
    assert summary["device"] == "NVIDIA H200"
    assert summary["first_pass_date"] < summary["date"]
    assert summary["gpu_tests_with_patch"] is None
    table = ab.render(summary)
    assert "better (4 of 4)" in table and "worse (0 of 4)" in table and "mixed (2 of 4)" in table


def test_passes_are_ordered_by_number_not_by_name(tmp_path: Path) -> None:
    # ten passes: ab-10 sorts before ab-2 as a name
    _write_passes(tmp_path, "v", {"x": ("<= 1", [float(i) for i in range(10)])})
    numbers = [p.number for p in ab.load_passes(tmp_path)]
    assert numbers == list(range(1, 11))


def test_bad_input_is_refused_with_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no ab-<pass>-<label>\.json"):
        ab.load_passes(tmp_path)
    _write_passes(tmp_path / "one", "v", {"x": ("<= 1", [1.0])})
    with pytest.raises(ValueError, match="passes labelled base and one other label"):
        ab.summarize(ab.load_passes(tmp_path / "one"))
    with pytest.raises(ValueError, match="must start with <= or >="):
        ab.lower_is_better("== 1")
    _write_passes(tmp_path / "target", "v", {"x": ("about 1", [1.0, 1.0])})
    done = subprocess.run(
        [sys.executable, str(BENCH / "ab_summary.py"), str(tmp_path / "target")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "must start with <= or >=" in done.stderr


def test_the_gpu_tests_of_the_patch_go_with_the_summary_and_onto_the_page(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "ab"
    _write_passes(runs, "v", {"latency": ("<= 1.05", [1.07, 1.05, 1.08])})
    (runs / "gpu-tests-v.xml").write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="50" failures="1" '
        'errors="0" skipped="2"/></testsuites>'
    )
    results = tmp_path / "results"
    results.mkdir()
    out = results / "s-ab-summary.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / "ab_summary.py"), str(runs), "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "better (2 of 2)" in done.stdout
    summary = json.loads(out.read_text())
    assert summary["gpu_tests_with_patch"] == {
        "tests": 50,
        "failures": 1,
        "errors": 0,
        "skipped": 2,
    }
    page = tmp_path / "docs" / "performance.md"
    subprocess.run(
        [
            sys.executable,
            str(BENCH / "report.py"),
            "--results",
            str(results),
            "--out",
            str(page),
            "--figures",
            str(tmp_path / "docs" / "_static"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    text = page.read_text()
    assert "## Experiments measured against the shipped code" in text
    assert "### `v`" in text and "50 run, 1 failed, 0 errors" in text
    assert "| `latency` | <= 1.05 | 1.070 | 1.050 | 1.080 | better (2 of 2) |" in text
    assert "Other results files" not in text  # a summary is not an unknown file
