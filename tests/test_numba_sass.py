"""Python handlers at their C++ twins' cost (issue 53): example_app's ``py_rpc_increment_thread``
and handlers.cu's ``rpc_increment_thread`` (and the launch-wide ``py_rpc_increment`` and
``rpc_increment``), each the one handler of ``single_thread_dispatcher``'s handler switch, inlined
there as in example_app's module, linked for an H100 (sm_90) and read back as SASS. The two
kernels differ only by the inlined handler, so their instructions compare the two handlers' code:
every global or generic load and store (the response is host memory mapped over PCIe, where each
one is a transaction), every branch and call, and the instructions in all.

Needs nvcc (the C++ sources), numba-cuda with NVVM (the Python handler), nvJitLink and nvdisasm
(``nvidia-cuda-nvdisasm``, in the ``test`` extra); no GPU.
"""

from __future__ import annotations

import collections
import importlib.util
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from skbuild_cudaq.realtime.link.device_code import LinkInput

pytestmark = pytest.mark.toolchain

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "example_app" / "src"
KERNEL = "single_thread_dispatcher"
#: Global and generic memory instructions (a load or store of the request, the response or a
#: header; shared-memory and local ones are LDS/STS and LDL/STL).
MEMORY = frozenset({"LDG", "STG", "LD", "ST", "ATOM", "ATOMG", "RED", "REDG"})
BRANCHES = frozenset({"BRA", "BRX", "JMP", "JMX"})
CALLS = frozenset({"CALL", "JMXU"})
#: What the Python twin's kernel may have beyond the C++ twin's: the C ABI wrapper bounds the
#: result length by the room (one min, a convergence barrier around the handler's exits), and a
#: register move or two on the way out.
EXTRA_INSTRUCTIONS = 12
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_.]*)")


def _toolchain() -> Path:
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
    from cuda.pathfinder import find_nvidia_binary_utility, load_nvidia_dynamic_lib

    try:
        load_nvidia_dynamic_lib("nvvm")
    except Exception as exc:
        pytest.skip(f"no NVVM (nvidia-nvvm): {exc}")
    nvdisasm = find_nvidia_binary_utility("nvdisasm")
    if nvdisasm is None:
        pytest.skip("no nvdisasm (pip install nvidia-cuda-nvdisasm)")
    return Path(nvdisasm)


def _nvcc_inputs(nvcc: Path, source: Path, out: Path) -> list[LinkInput]:
    from skbuild_cudaq.build._embed import CompileFlags, fatbin_command, run_compile
    from skbuild_cudaq.fatbin import read_fatbin_file
    from skbuild_cudaq.realtime.link.device_code import LinkInput

    fatbin = out / f"{source.stem}.fatbin"
    command = fatbin_command(nvcc, source, fatbin, architectures=["80"], flags=CompileFlags())
    run_compile(command, fatbin, f"nvcc of {source.name}", cwd=source.parent)
    return [LinkInput(f"{source.name}:{i}", c) for i, c in enumerate(read_fatbin_file(fatbin))]


def _python_twin_inputs(name: str) -> list[LinkInput]:
    """Handler ``name`` of example_app's file, compiled as the build compiles it."""
    from skbuild_cudaq.numba import device_code

    spec = importlib.util.spec_from_file_location("example_py_handlers", SRC / "py_handlers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(device_code(getattr(module, name), architectures=(80,)).inputs)


def _kernel_instructions(nvdisasm: Path, cubin: bytes, out: Path) -> list[str]:
    """The opcodes of the dispatch kernel's own code (not the handlers' copies for the
    pointer that the linker put after it in its section)."""
    path = out / f"{KERNEL}.cubin"
    path.write_bytes(cubin)
    text = subprocess.run(
        [str(nvdisasm), "-c", str(path)], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    label = f".text.{KERNEL}:\n"
    assert label in text, f"no {KERNEL} in the linked module"
    body = text.split(label, 1)[1]
    end = [i for i in (body.find("\t.section"), body.find(".type")) if i >= 0]
    body = body[: min(end)] if end else body
    return _INSTRUCTION.findall(body)


def _link_with_switch(
    handler: str, thread: bool, inputs: list[LinkInput], tools: tuple[Path, Path], out: Path
) -> list[str]:
    """``single_thread_dispatcher``'s instructions, its switch calling ``handler`` (of the
    shape ``thread`` says; none for ``""``) directly. ``tools``: nvcc and nvdisasm."""
    from skbuild_cudaq.build._handler_switch import switch_source
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.device_code import DeviceCode
    from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

    nvcc, nvdisasm = tools
    where = out / (handler or "no_handler")
    where.mkdir()
    switch = where / "handler_switch.cu"
    exports = [("example_app", [handler] if handler else [])]
    text = switch_source("twins", exports) if thread else switch_source("twins", [], exports)
    switch.write_text(text, encoding="utf-8")
    code = DeviceCode(where, (*inputs, *_nvcc_inputs(nvcc, switch, where)))
    cubin = link_device_code(code, LinkOptions(arch="sm_90"), cache=LinkCache(None)).cubin
    return _kernel_instructions(nvdisasm, cubin, where)


def _figures(instructions: list[str]) -> dict[str, collections.Counter[str]]:
    """Memory instructions by opcode (width included), branches, calls, all."""
    figures: dict[str, collections.Counter[str]] = {
        "memory": collections.Counter(),
        "branches": collections.Counter(),
        "calls": collections.Counter(),
        "all": collections.Counter(),
    }
    for opcode in instructions:
        kind = opcode.split(".", 1)[0]
        figures["all"]["instructions"] += 1
        for name, kinds in (("memory", MEMORY), ("branches", BRANCHES), ("calls", CALLS)):
            if kind in kinds:
                figures[name][opcode] += 1
    return figures


@pytest.mark.parametrize(
    ("cpp_twin", "py_twin", "thread"),
    [("rpc_increment_thread", "py_rpc_increment_thread", True),
     ("rpc_increment", "py_rpc_increment", False)],
)  # fmt: skip
def test_the_python_twin_inlines_to_its_cpp_twins_code(
    nvcc: Path, tmp_path: Path, cpp_twin: str, py_twin: str, thread: bool
) -> None:
    tools = (nvcc, _toolchain())
    inputs = [
        *_nvcc_inputs(nvcc, SRC / f"{KERNEL}.cu", tmp_path),
        *_nvcc_inputs(nvcc, SRC / "handlers.cu", tmp_path),
        *_python_twin_inputs(py_twin),
    ]
    # the same inputs each time: only the switch, so only the inlined handler, differs
    cpp = _figures(_link_with_switch(cpp_twin, thread, inputs, tools, tmp_path))
    py = _figures(_link_with_switch(py_twin, thread, inputs, tools, tmp_path))
    bare = _figures(_link_with_switch("", thread, inputs, tools, tmp_path))
    # each twin is inlined: its loads and stores are in the kernel (the pointer's are not)
    for twin in (cpp, py):
        assert twin["memory"] - bare["memory"], (twin["memory"], bare["memory"])
        assert twin["all"]["instructions"] > bare["all"]["instructions"]

    # no global or generic load or store the C++ twin has not, of any width (a byte store
    # where C++ stores a word is a memory instruction more of the narrower kind)
    assert py["memory"] - cpp["memory"] == collections.Counter(), (py["memory"], cpp["memory"])
    # no call the C++ twin makes not: a 64-bit division or remainder is a subroutine call,
    # and a handler not inlined is a call through its address
    assert py["calls"] - cpp["calls"] == collections.Counter(), (py["calls"], cpp["calls"])
    # no branch more: bounds and shape checks (a slice, a view) and 64-bit loop counts each
    # branch, and so do extra unrolled copies of a loop
    assert sum(py["branches"].values()) <= sum(cpp["branches"].values()), (
        py["branches"],
        cpp["branches"],
    )
    assert py["all"]["instructions"] <= cpp["all"]["instructions"] + EXTRA_INSTRUCTIONS, (
        py["all"],
        cpp["all"],
    )
