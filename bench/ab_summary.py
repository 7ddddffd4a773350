"""The verdict of an A/B of ``tools/variant-ab.sh``: each goal pass by pass, and how often the
patched code did better than the shipped code in the pass right before or after it.

    python bench/ab_summary.py DIR [--out DIR/ab-summary.json]

``DIR`` holds ``ab-<pass>-<label>.json`` (``bench/dispatch.py`` results), passes numbered from
1 and alternated: ``base`` (the shipped code), then the patched code, and so on. A whole pass
moves every row together (by 1-2 % on a lent H200), so one pass of each says nothing; each
patched pass is compared with each base pass next to it (up to two comparisons), and a goal
counts as *better* only where the patched code won every comparison, *worse* only where it lost
every one, *mixed* otherwise. A goal's direction is its target's (``<=``: lower is better,
``>=``: higher). With the script's ``TESTS=1``, the counts of ``gpu-tests-<name>.xml`` (every
one-GPU test with the patch applied) go with them. Figures are printed, and written to
``--out``; nothing is measured here.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree


@dataclass(frozen=True)
class Pass:
    """One ``bench/dispatch.py`` run of an A/B: its number, label and goal values."""

    number: int
    label: str
    goals: dict[str, dict[str, Any]]
    meta: dict[str, Any]


def load_passes(directory: Path) -> list[Pass]:
    """The passes in ``directory``, in pass order."""
    passes = []
    for path in directory.glob("ab-*.json"):
        parts = path.stem.split("-", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        keys = ("date", "device", "compute_capability", "versions")
        meta = {k: data[k] for k in keys if k in data}
        passes.append(Pass(int(parts[1]), parts[2], data["goals"], meta))
    passes.sort(key=lambda p: p.number)
    if not passes:
        msg = f"no ab-<pass>-<label>.json in {directory}"
        raise FileNotFoundError(msg)
    return passes


def lower_is_better(target: str) -> bool:
    """A goal's direction from its target (``'<= 1.05'``, ``'>= 0.8'``)."""
    text = target.strip()
    if text.startswith("<="):
        return True
    if text.startswith(">="):
        return False
    msg = f"a goal's target must start with <= or >=: {target!r}"
    raise ValueError(msg)


def gpu_tests(path: Path) -> dict[str, int] | None:
    """Counts of the JUnit XML the script's ``TESTS=1`` writes, or None without one."""
    if not path.is_file():
        return None
    root = ElementTree.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return None
    keys = ("tests", "failures", "errors", "skipped")
    return {k: int(suite.get(k, "0")) for k in keys}


def summarize(passes: list[Pass]) -> dict[str, Any]:
    """Each goal's values pass by pass and its verdict over adjacent base/patched comparisons
    (``gpu_tests_with_patch`` is None: ``main`` fills it in from the run's JUnit XML)."""
    labels = {p.label for p in passes}
    if "base" not in labels or len(labels) != 2:
        msg = f"an A/B has passes labelled base and one other label, not {sorted(labels)}"
        raise ValueError(msg)
    (name,) = labels - {"base"}
    goals: dict[str, Any] = {}
    for key, first in passes[0].goals.items():
        lower = lower_is_better(str(first["goal"]))
        values: list[float | None] = [
            float(p.goals[key]["value"]) if key in p.goals else None for p in passes
        ]
        wins = comparisons = 0
        for i, p in enumerate(passes):
            mine = values[i]
            if p.label == "base" or mine is None:
                continue
            for j in (i - 1, i + 1):
                other = values[j] if 0 <= j < len(passes) and passes[j].label == "base" else None
                if other is not None:
                    comparisons += 1
                    wins += int(mine < other if lower else mine > other)
        verdict = (
            "none"
            if comparisons == 0
            else "better"
            if wins == comparisons
            else "worse"
            if wins == 0
            else "mixed"
        )
        base_values = [v for p, v in zip(passes, values, strict=True) if p.label == "base"]
        patched_values = [v for p, v in zip(passes, values, strict=True) if p.label == name]
        goals[key] = {
            "target": first["goal"],
            "values": values,
            "base": base_values,
            name: patched_values,
            "patched_wins": wins,
            "comparisons": comparisons,
            "verdict": verdict,
        }
    first_meta, last_meta = passes[0].meta, passes[-1].meta
    return {
        "benchmark": "variant_ab",
        "date": last_meta.get("date", ""),
        "first_pass_date": first_meta.get("date", ""),
        "device": first_meta.get("device", ""),
        "compute_capability": first_meta.get("compute_capability", ""),
        "versions": first_meta.get("versions", {}),
        "variant": name,
        "patch": f"bench/variants/{name}.patch",
        "gpu_tests_with_patch": None,
        "passes": [{"number": p.number, "label": p.label} for p in passes],
        "goals": goals,
    }


def render(summary: dict[str, Any]) -> str:
    """The table ``tools/variant-ab.sh`` prints."""
    labels = [p["label"] for p in summary["passes"]]
    lines = [f"{'goal':52s} " + " ".join(f"{label[:8]:>8s}" for label in labels) + "  verdict"]
    for key, goal in summary["goals"].items():
        cells = " ".join("       -" if v is None else f"{v:8.3f}" for v in goal["values"])
        verdict = f"{goal['verdict']} ({goal['patched_wins']} of {goal['comparisons']})"
        lines.append(f"{key:52s} {cells}  {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        summary = summarize(load_passes(args.directory))
        xml = args.directory / f"gpu-tests-{summary['variant']}.xml"
        summary["gpu_tests_with_patch"] = gpu_tests(xml)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        print(f"bench/ab_summary.py: {exc}", file=sys.stderr)
        return 1
    out = args.out or args.directory / "ab-summary.json"
    out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(render(summary))
    if summary["gpu_tests_with_patch"] is not None:
        print(f"GPU tests with the patch: {summary['gpu_tests_with_patch']}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
