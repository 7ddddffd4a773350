"""Builds the small test binaries of the link/library tests (nvcc + gcc, no GPU).

Mimics what an extension built with skbuild-cudaq carries:
- handlers compiled by ``nvcc -c -rdc=true code=lto_80`` (nvcc puts their LTO-IR
  in ``__nv_relfatbin`` itself), one object per translation unit;
- a custom dispatch kernel compiled on its own to an LTO-IR fatbin and placed in
  ``__nv_relfatbin`` by a C file with a top-level ``__asm__`` ``.incbin``.
The shared libraries are only read as files (never loaded), so the handlers'
host registration symbols may stay undefined.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import skbuild_cudaq

HERE = Path(__file__).resolve().parent
LTO_80 = "-gencode=arch=compute_80,code=lto_80"
LTO_90 = "-gencode=arch=compute_90,code=lto_90"
LTO_100 = "-gencode=arch=compute_100,code=lto_100"


@dataclass(frozen=True)
class DeviceBinaries:
    root: Path
    app: Path  # dispatcher (incbin, "aR") + handlers_a.o + handlers_b.o: one section, 3 containers
    two_sections: Path  # dispatcher with "aR" + handlers fatbin with "" flags: two sections
    missing: Path  # kernel calling an undefined device function
    duplicate: Path  # defines cudaq_dev_rx_poll again
    launch_checks: Path  # cluster / cooperative report kernels (lto_90)
    mixed: Path  # app's dispatcher (lto_80) + handlers_a.o + launch_checks (lto_90 only)
    needs_90: Path  # missing (lto_80) + the function it calls, defined for sm_90 only (lto_90)
    newer_only: Path  # app's dispatcher + handlers_a (lto_80) + launch_checks (lto_100 only)
    plain: Path  # no device code at all
    dispatcher_fatbin: Path
    mailbox_bridge: Path  # a bridge of one's own: the three hooks (LTO-IR fatbin)
    not_a_bridge: Path  # an LTO-IR fatbin without the hooks


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        msg = f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
        raise RuntimeError(msg)


def _embed_c(fatbin: Path, flags: str) -> str:
    return (
        "/* generated: places an LTO-IR fatbin in __nv_relfatbin */\n"
        f'__asm__(".section __nv_relfatbin,\\"{flags}\\"\\n.balign 8\\n'
        f'.incbin \\"{fatbin}\\"\\n.previous");\n'
    )


def build(nvcc: Path, root: Path) -> DeviceBinaries:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        msg = "no C compiler (gcc) to build the test binaries"
        raise RuntimeError(msg)
    root.mkdir(parents=True, exist_ok=True)
    inc = f"-I{skbuild_cudaq.include_dir()}"
    test_inc = f"-I{HERE.parent / 'include'}"  # cudaq_test/one_thread_loop.cuh

    def fatbin(name: str, gencode: str = LTO_80, output: str | None = None) -> Path:
        out = root / f"{output or name}.fatbin"
        src = HERE / f"{name}.cu"
        _run(
            [
                str(nvcc),
                "-fatbin",
                "-rdc=true",
                "-std=c++17",
                gencode,
                inc,
                test_inc,
                "-o",
                str(out),
                str(src),
            ],
            root,
        )
        return out

    def obj(name: str) -> Path:
        out = root / f"{name}.o"
        src = HERE / f"{name}.cu"
        _run(
            [
                str(nvcc),
                "-c",
                "-rdc=true",
                "-std=c++17",
                LTO_80,
                "-Xcompiler",
                "-fPIC",
                inc,
                test_inc,
                "-o",
                str(out),
                str(src),
            ],
            root,
        )
        return out

    def embed(name: str, fat: Path, flags: str = "aR") -> Path:
        src = root / f"{name}_embed.c"
        src.write_text(_embed_c(fat, flags))
        out = root / f"{name}_embed.o"
        _run([gcc, "-c", "-fPIC", "-o", str(out), str(src)], root)
        return out

    def shared(name: str, objects: list[Path], gc_sections: bool = True) -> Path:
        out = root / f"lib{name}.so"
        gc = ["-Wl,--gc-sections"] if gc_sections else []  # it drops a non-alloc section
        _run([gcc, "-shared", *gc, "-o", str(out), *map(str, objects)], root)
        return out

    dispatcher = fatbin("single_thread_dispatcher")
    handlers_a, handlers_b = obj("handlers_a"), obj("handlers_b")
    app = shared("app", [embed("app", dispatcher), handlers_a, handlers_b])
    handlers_fat = fatbin("handlers_b")
    two = shared(
        "two_sections",
        [embed("two_a", dispatcher, "aR"), embed("two_b", handlers_fat, "")],
        gc_sections=False,
    )
    missing_fat = fatbin("missing_symbol")
    missing = shared("missing", [embed("missing", missing_fat)])
    duplicate = shared("duplicate", [embed("duplicate", fatbin("duplicate_hook"))])
    checks_fat = fatbin("launch_checks", LTO_90)
    checks = shared("launch_checks", [embed("checks", checks_fat)])
    mixed = shared(
        "mixed", [embed("mixed_a", dispatcher), embed("mixed_b", checks_fat), handlers_a]
    )
    needs_90 = shared(
        "needs_90",
        [
            embed("needs_a", missing_fat),
            embed("needs_b", fatbin("missing_defined_90", LTO_90)),
        ],
    )
    newer_only = shared(
        "newer_only",
        [
            embed("newer_a", dispatcher),
            embed("newer_b", fatbin("launch_checks", LTO_100, "launch_checks_100")),
            handlers_a,
        ],
    )
    plain_src = root / "plain.c"
    plain_src.write_text("int plain_function(int x) { return x + 1; }\n")
    plain = root / "libplain.so"
    _run([gcc, "-shared", "-fPIC", "-o", str(plain), str(plain_src)], root)
    mailbox, not_a_bridge = fatbin("mailbox_bridge"), fatbin("not_a_bridge")
    return DeviceBinaries(
        root, app, two, missing, duplicate, checks, mixed, needs_90, newer_only, plain,
        dispatcher, mailbox, not_a_bridge,
    )  # fmt: skip


_BUILT: dict[Path, DeviceBinaries] = {}


def build_once(nvcc: Path, root: Path) -> DeviceBinaries:
    """Build once per test session (several test modules share the binaries)."""
    if not _BUILT:
        _BUILT[nvcc] = build(nvcc, root)
    return next(iter(_BUILT.values()))
