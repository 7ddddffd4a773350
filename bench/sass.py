"""The SASS of the measured kernels side by side, without a GPU.

One run (nvcc, nvJitLink and nvdisasm; no GPU)::

    python bench/sass.py [--out bench/results/sass.json] [--arch 90]

Builds the module ``bench/phases.py`` measures, without the stamps (the production code:
example_app's kernels and handlers, the run time, the floors, the probes and the handler
switch), links it with nvJitLink and disassembles it with nvdisasm. For each kernel it
reports the instruction count and the order in which the poll issues the loads of a
request (byte offsets in the slot, from the first system-scope acquire on), and, for each
pair of ``PAIRS``, how many instructions differ once register numbers, labels and the
kernel's own name are set aside: two kernels that differ in nothing but registers count
0. That is how session 9 found that the single-thread example and ``variant_aligned``
(measured 0.12 us apart in session 8) differed in the schedule of those loads and in the
shared-memory layout, and nothing else.

nvdisasm: ``--nvdisasm``, else on ``PATH``, else the ``nvidia-cuda-nvdisasm`` wheel
(``pip install nvidia-cuda-nvdisasm``; a newer one reads older cubins).
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "sass.json"

#: (kernel, reference): what each pair says.
PAIRS: tuple[tuple[str, str, str], ...] = (
    (
        "single_thread_dispatcher",
        "variant_aligned_copy",
        "the shipped single-thread kernel against the same code through bench/phases.py's "
        "probe_loop, measured 0.12 us faster in session 8",
    ),
    (
        "single_thread_late_max_dispatcher",
        "variant_aligned_copy",
        "the single-thread kernel as before session 9 (max_result computed after entering "
        "the session)",
    ),
    (
        "single_thread_rebuilt_dispatcher",
        "single_thread_dispatcher",
        "control: the same source compiled twice (0 expected)",
    ),
    (
        "variant_aligned_copy",
        "variant_aligned",
        "control: the same code under two names (0 expected)",
    ),
    (
        "variant_aligned_solo",
        "variant_aligned_copy",
        "variant_aligned's loop instantiated for it alone: its own stage, laid out first in "
        "its shared memory as the examples' are",
    ),
    (
        "variant_aligned_solo",
        "single_thread_dispatcher",
        "the same, against the shipped single-thread kernel",
    ),
    (
        "cluster_launch_pointer_dispatcher",
        "cluster_dispatcher",
        "the cluster kernel with its launch-wide call through the pointer (as before session "
        "11) against the launch-wide switch",
    ),
    (
        "cluster_push_dispatcher",
        "cluster_dispatcher",
        "the cluster kernel with its mailbox pushed into every block before the barrier",
    ),
    (
        "cluster_direct_dispatcher",
        "cluster_dispatcher",
        "the cluster kernel with echo called by name against the pointer",
    ),
)

_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;?\s*(?:/\* 0x[0-9a-f]+ \*/)?\s*$")
_SECTION = re.compile(r"^\s*\.section\s+\.text\.([A-Za-z_$][A-Za-z0-9_$]*),", re.MULTILINE)
_ACQUIRE = re.compile(r"\bLDG\.E(?:\.\d+)?\.STRONG\.SYS\b")
_LOAD64 = re.compile(r"\bLDG?\.E\.64\s+R\d+,\s*desc\[[^\]]*\]\[(R\d+)\.64(?:\+(-?0x[0-9a-f]+))?\]")
_BRANCH = re.compile(r"\b(?:BRA|EXIT|CALL|RET|BRX)\b")
_LABEL = re.compile(r"^\s*(\.L_x_[0-9]+):\s*$")
_FENCE_SYS = re.compile(r"\bMEMBAR\.[A-Z.]*SYS\b")
_RELEASE = re.compile(r"\bSTG?\.E(?:\.\d+)?\.STRONG\.SYS\b")

#: The kernels of the one-thread hot path: what :func:`hot_path` reports, the floors first.
HOT_PATH_KERNELS: tuple[str, ...] = (
    "pingpong_floor",
    "stage_floor",
    "naive_floor",
    "ladder_bridge",
    "ladder_validate",
    "ladder_stats",
    "single_thread_dispatcher",
    "variant_aligned",
)


@dataclass(frozen=True)
class Instruction:
    offset: int
    text: str
    labels: tuple[str, ...] = ()  #: the labels just before it (branch targets)


def find_nvdisasm(given: str | None = None) -> str | None:
    """``given``, else nvdisasm on ``PATH``, else the one of the ``nvidia-cuda-nvdisasm``
    wheel in this environment; None where there is none."""
    if given:
        return given
    found = shutil.which("nvdisasm")
    if found:
        return found
    from skbuild_cudaq.build._toolchain import tool_from_wheel

    wheel = tool_from_wheel("nvdisasm", ("nvidia-cuda-nvdisasm",))
    return str(wheel) if wheel else None


def parse(sass: str) -> dict[str, list[Instruction]]:
    """nvdisasm's listing (``-c``, with or without ``-hex``) as each kernel's instructions."""
    parts = _SECTION.split(sass)
    kernels: dict[str, list[Instruction]] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        instrs = []
        labels: list[str] = []
        for line in body.splitlines():
            label = _LABEL.match(line)
            if label:
                labels.append(label.group(1))
                continue
            match = _INSTR.match(line)
            if match and match.group(2):
                text = match.group(2).rstrip(" ;")
                instrs.append(Instruction(int(match.group(1), 16), text, tuple(labels)))
                labels = []
        kernels[name] = instrs
    return kernels


def normalize(instrs: list[Instruction], kernel: str) -> list[str]:
    """The instructions with register and predicate numbers, labels, absolute branch
    targets and the kernel's own name set aside."""
    out = []
    for ins in instrs:
        text = ins.text.replace(kernel, "<kernel>")
        text = re.sub(r"\bU?R(?:[0-9]+|Z)\b", "R", text)
        text = re.sub(r"\bU?P(?:[0-9]|T)\b", "P", text)
        text = re.sub(r"\.L_x_[0-9]+", "L", text)
        text = re.sub(r"\bMOV R, 0x[0-9a-f]{3,}\b", "MOV R, <address>", text)
        out.append(text)
    return out


def differing(a: list[str], b: list[str]) -> int:
    """How many lines of ``a`` and ``b`` are not in their longest common alignment."""
    return sum(
        1
        for line in difflib.unified_diff(a, b, n=0, lineterm="")
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


def _request_load_sites(instrs: list[Instruction]) -> list[tuple[int, int]]:
    """Each load :func:`request_loads` describes: where it stands in the listing, and its
    byte offset."""
    start = _acquire_index(instrs)
    if start is None:
        return []
    base: str | None = None
    found: list[tuple[int, int]] = []
    for i in range(start, min(len(instrs), start + 400)):
        if found and _BRANCH.search(instrs[i].text):
            break
        match = _LOAD64.search(instrs[i].text)
        if not match:
            continue
        if base is None:
            base = match.group(1)
        if match.group(1) == base:
            found.append((i, int(match.group(2) or "0", 16)))
    return found


def request_loads(instrs: list[Instruction]) -> list[int]:
    """The byte offsets of the 8-byte loads off one base register that follow the kernel's
    first system-scope acquire (the poll's flag), up to the first branch after them: the
    claim's loads of the request, in the order they are issued. Empty if none."""
    return [offset for _, offset in _request_load_sites(instrs)]


def _acquire_index(instrs: list[Instruction]) -> int | None:
    return next((i for i, ins in enumerate(instrs) if _ACQUIRE.search(ins.text)), None)


_TARGET = re.compile(r"`\((\.L_x_[0-9]+)\)")
_GUARD = re.compile(r"^@!?U?P[0-9T]+\s+")


def _successors(instrs: list[Instruction], i: int, where: dict[str, int]) -> list[int]:
    """Where control can go after instruction ``i``: the next one, a branch's target, both
    for a conditional branch; nothing after an unconditional ``EXIT`` or ``RET``."""
    text = instrs[i].text
    guarded = bool(_GUARD.match(text))
    op = _GUARD.sub("", text).split()[0] if text else ""
    if op in ("EXIT", "RET") or op.startswith("RET."):
        return [i + 1] if guarded else []
    target = _TARGET.search(text)
    if op.startswith("BRA") and target:
        # ``BRA P0, `(..)``, ``BRA.DIV`` and ``BRA.CONV`` are conditional like a guarded one.
        conditional = guarded or op != "BRA" or "," in text
        taken = [where[target.group(1)]] if target.group(1) in where else []
        return [*taken, i + 1] if conditional else taken
    return [i + 1]


def _distance(
    instrs: list[Instruction], start: int, goal: int, where: dict[str, int]
) -> int | None:
    """The fewest instructions executed from ``start`` to ``goal`` along the listing's
    control flow (the path a hit takes, not the layout's distance), or ``None``."""
    seen = {start: 0}
    queue = [start]
    for i in queue:
        if i == goal:
            return seen[i]
        for nxt in _successors(instrs, i, where):
            if nxt < len(instrs) and nxt not in seen:
                seen[nxt] = seen[i] + 1
                queue.append(nxt)
    return None


def hot_path(instrs: list[Instruction]) -> dict[str, Any]:
    """Where a one-thread kernel's round trip waits on its own instructions, read off the
    listing. ``publish_to_poll``: the opcodes executed from the publish (the first
    system-scope release store after a system-scope fence) to the next poll's acquire,
    following unconditional branches and taking no conditional one -- each is time a
    back-to-back round trip pays in full, since the next request cannot have been written
    before the host saw the answer. ``acquire_to_first_request_load`` and
    ``acquire_to_last_request_load``: the fewest instructions executed from the poll's
    acquire to the first and the last load of the request (see :func:`request_loads`),
    along the control flow, so a not-taken miss path laid out in between does not count.
    ``None`` for what the kernel does not have."""
    out: dict[str, Any] = {
        "publish_to_poll": None,
        "acquire_to_first_request_load": None,
        "acquire_to_last_request_load": None,
    }
    where = {label: i for i, ins in enumerate(instrs) for label in ins.labels}
    start = _acquire_index(instrs)
    sites = _request_load_sites(instrs)
    if start is not None and sites:
        out["acquire_to_first_request_load"] = _distance(instrs, start, sites[0][0], where)
        out["acquire_to_last_request_load"] = _distance(instrs, start, sites[-1][0], where)
    publish = next(
        (
            i
            for i, ins in enumerate(instrs)
            if _RELEASE.search(ins.text)
            and any(_FENCE_SYS.search(x.text) for x in instrs[max(0, i - 4) : i])
        ),
        None,
    )
    if publish is None:
        return out
    path: list[str] = []
    i = publish + 1
    while i < len(instrs) and len(path) < 200:
        text = instrs[i].text
        if _ACQUIRE.search(text):
            out["publish_to_poll"] = path
            break
        path.append(text.split()[0])
        nxt = _successors(instrs, i, where)
        if not nxt:
            break
        i = nxt[-1]  # a conditional branch's fall-through, an unconditional one's target
    return out


def disassemble(nvdisasm: str, cubin: Path) -> dict[str, list[Instruction]]:
    done = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        msg = f"nvdisasm failed on {cubin}:\n{done.stderr.strip()}"
        raise SystemExit(msg)
    return parse(done.stdout)


def build_module(work: Path, arch: str) -> Path:
    """bench/phases.py's module without the stamps, linked for ``sm_<arch>``."""
    import phases

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("bench/sass.py needs nvcc on PATH")
    inputs, switch = phases.compile_all(nvcc, work, stamps=False)
    cubin = work / "phases.cubin"
    cubin.write_bytes(phases.nvjitlink_link([*inputs, switch], arch))
    return cubin


def report(kernels: dict[str, list[Instruction]]) -> dict[str, Any]:
    rows = {
        name: {"instructions": len(instrs), "request_loads": request_loads(instrs)}
        for name, instrs in sorted(kernels.items())
    }
    hot = {name: hot_path(kernels[name]) for name in HOT_PATH_KERNELS if name in kernels}
    pairs = []
    for kernel, reference, what in PAIRS:
        if kernel not in kernels or reference not in kernels:
            continue
        a = normalize(kernels[kernel], kernel)
        b = normalize(kernels[reference], reference)
        pairs.append(
            {
                "kernel": kernel,
                "reference": reference,
                "what": what,
                "differing_lines": differing(a, b),
                "same_request_load_order": rows[kernel]["request_loads"]
                == rows[reference]["request_loads"],
            }
        )
    return {"kernels": rows, "pairs": pairs, "hot_path": hot}


def _version(tool: str) -> str:
    done = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--arch", default="90", help="link for sm_<arch> (default: 90, H200)")
    parser.add_argument("--nvdisasm", default=None, help="nvdisasm to use (see the module doc)")
    opts = parser.parse_args(argv)
    nvdisasm = find_nvdisasm(opts.nvdisasm)
    if nvdisasm is None:
        parser.error("no nvdisasm: pass --nvdisasm, or pip install nvidia-cuda-nvdisasm")
    with tempfile.TemporaryDirectory(prefix="cudaq-sass-") as tmp:
        print(f"building the phases module for sm_{opts.arch} ...", file=sys.stderr)
        cubin = build_module(Path(tmp), opts.arch)
        kernels = disassemble(nvdisasm, cubin)
    nvcc = shutil.which("nvcc") or "nvcc"
    results = {
        "benchmark": "sass",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "arch": f"sm_{opts.arch}",
        "versions": {"nvcc": _version(nvcc), "nvdisasm": _version(nvdisasm)},
        **report(kernels),
    }
    for pair in results["pairs"]:
        order = "same" if pair["same_request_load_order"] else "other"
        print(
            f"{pair['kernel']:>36} vs {pair['reference']:<26} "
            f"{pair['differing_lines']:>4} lines differ, {order} request-load order",
            file=sys.stderr,
        )
    for name, hot in results["hot_path"].items():
        ops = hot["publish_to_poll"]
        print(
            f"{name:>36}: publish to poll {'-' if ops is None else len(ops):>3}, acquire to "
            f"first/last request load {hot['acquire_to_first_request_load']}/"
            f"{hot['acquire_to_last_request_load']}",
            file=sys.stderr,
        )
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {opts.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
