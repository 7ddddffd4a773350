"""The ring's memory-ordering contract in the Python paths (docs/guides/host-path.md, "The
ring's memory-ordering contract"): every access to a request or response flag and to the
request-id source goes through ``skbuild_cudaq.realtime.ring._atomics.Words`` (acquire
loads, release stores, atomic read-modify-write), never a plain load or store of a
memoryview, a numpy view or ``struct`` at a flag's offset. x86-64 (TSO) hid the difference;
aarch64 (Grace) does not.

The lint reads the run time's sources; the tests below it show that it finds each plain
access the Python paths used to make, and that the words behave as documented."""

from __future__ import annotations

import ast
import ctypes
from pathlib import Path
from typing import Any

import pytest

import skbuild_cudaq.realtime

RUNTIME = Path(skbuild_cudaq.realtime.__file__).parent

#: Names of the ring's shared words (RingMemory attributes, locals bound to them).
SHARED_WORDS = {"rx_flags", "tx_flags", "ids"}
#: Offsets of the shared words in a ring allocation (RingLayout properties).
SHARED_OFFSETS = {"rx_flags_offset", "tx_flags_offset", "ids_offset"}
#: Calls that read or write bytes at an offset (plain accesses when given a flag's offset).
BYTE_CALLS = {"pack_into", "unpack_from", "memset", "memmove", "from_buffer", "frombuffer"}
#: (file, function) allowed a plain access, each for its reason.
ALLOWED = {
    # zeroes the flags while no kernel runs (documented: "Only while no kernel runs")
    ("bridge.py", "reset"),
}


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _mentions_offset(node: ast.AST) -> bool:
    return any(_last_name(n) in SHARED_OFFSETS for n in ast.walk(node))


def _subscript_problem(node: ast.Subscript) -> str | None:
    target = node.value
    name = _last_name(target)
    if name in SHARED_WORDS or (name is not None and "publish" in name):
        return f"plain subscript of {name}"
    key = node.slice
    if isinstance(key, ast.Constant) and key.value in SHARED_WORDS:
        return f"plain view {key.value!r}"
    if _mentions_offset(key):
        return "a view of the buffer at a shared word's offset"
    return None


def _call_problem(node: ast.Call) -> str | None:
    if _last_name(node.func) in BYTE_CALLS and any(
        _mentions_offset(a) for a in [*node.args, *(k.value for k in node.keywords)]
    ):
        return f"{_last_name(node.func)} at a shared word's offset"
    return None


def plain_accesses(source: str, filename: str = "<snippet>") -> list[str]:
    """Every plain access to a shared word of the ring in ``source``: ``file:line
    function: what``."""
    found: list[str] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = child.name
            problem = None
            if isinstance(child, ast.Subscript):
                problem = _subscript_problem(child)
            elif isinstance(child, ast.Call):
                problem = _call_problem(child)
            if problem and (Path(filename).name, function) not in ALLOWED:
                found.append(f"{filename}:{child.lineno} {function}: {problem}")
            visit(child, inner)

    visit(ast.parse(source), "<module>")
    return found


def test_the_python_paths_touch_no_ring_flag_without_an_atomic() -> None:
    sources = sorted(RUNTIME.rglob("*.py"))
    assert any(p.name == "client.py" for p in sources)
    found = [
        hit
        for path in sources
        for hit in plain_accesses(path.read_text(), str(path.relative_to(RUNTIME)))
    ]
    assert found == []


@pytest.mark.parametrize(
    "snippet",
    [
        "def f(mem, slot, seq):\n    mem.rx_flags[slot] = seq\n",
        "def f(mem, slot):\n    return mem.tx_flags[slot]\n",
        "def f(views, slots):\n    return views['tx_flags'][slots]\n",
        "def f(mem):\n    ids = mem.ids\n    ids[0] = ids[0] + 1\n",
        "def f(mv, lay, n):\n    return mv[lay.rx_flags_offset : lay.rx_flags_offset + 4 * n]\n",
        "def f(buf, lay, s):\n    struct.pack_into('<I', buf, lay.tx_flags_offset + 4 * s, 1)\n",
        "def f(words, i):\n    return words.publish_words[i]\n",
    ],
)
def test_the_lint_finds_each_kind_of_plain_access(snippet: str) -> None:
    assert plain_accesses(snippet)


def test_the_lint_leaves_atomic_accesses_alone() -> None:
    snippet = (
        "def f(mem, slot, seq):\n"
        "    mem.rx_flags.store(slot, seq)\n"
        "    flags = mem.tx_flags.load_all()\n"
        "    return flags[0], mem.ids.fetch_add(0, 1)\n"
    )
    assert plain_accesses(snippet) == []


def _words(buf: bytearray, offset: int, count: int, width: int) -> Any:
    from skbuild_cudaq.realtime.ring._atomics import Words

    return Words(ctypes.addressof(ctypes.c_char.from_buffer(buf)) + offset, count, width)


def test_ring_memory_flags_are_atomic_words_with_no_plain_indexing() -> None:
    from skbuild_cudaq.realtime.ring import RingClient, RingLayout, RingServer
    from skbuild_cudaq.realtime.ring._atomics import Words

    layout = RingLayout(4, 64)
    buf = bytearray(layout.total_bytes)
    client, server = RingClient(buf, layout, spin=0), RingServer(buf, layout)
    mem = client._mem
    assert all(isinstance(w, Words) for w in (mem.rx_flags, mem.tx_flags, mem.ids))
    with pytest.raises(TypeError):
        mem.rx_flags[0]  # type: ignore[index]
    assert "rx_flags" not in mem.numpy()
    ticket = client.submit("echo", b"abc")
    assert mem.rx_flags.load(0) == 1  # visible through the words and through the bytes
    assert int.from_bytes(buf[layout.rx_flags_offset : layout.rx_flags_offset + 4], "little") == 1
    req = server.poll()
    assert req is not None and req.args == b"abc"
    server.publish(0, b"cba")
    assert client.wait(ticket, 1.0).result == b"cba"
    assert mem.ids.load(0) == 1
    client.close()
    assert mem.rx_flags.released
    with pytest.raises(ValueError, match="released"):
        mem.rx_flags.load(0)


def test_words_load_store_fetch_add_gather_scatter_clear() -> None:
    buf = bytearray(64)
    w32 = _words(buf, 8, 4, 4)
    w32.store(1, 0xFFFFFFFF)
    assert buf[12:16] == b"\xff\xff\xff\xff"
    assert w32.fetch_add(1, 2) == 0xFFFFFFFF
    assert w32.load(1) == 1  # wrapped like the u32 sequence
    w32.scatter([3, 0], [7, 9])
    assert w32.gather([0, 3]) == [9, 7]
    assert w32.load_all() == [9, 1, 0, 7]
    assert len(w32) == 4
    w32.clear()
    assert bytes(buf[8:24]) == bytes(16)
    w64 = _words(buf, 32, 1, 8)
    assert w64.fetch_add(0, 5) == 0
    assert w64.fetch_add(0, (1 << 64) - 5) == 5
    assert w64.load(0) == 0


def test_words_refuse_what_would_be_a_bad_access() -> None:
    from skbuild_cudaq.realtime.ring._atomics import Words

    buf = bytearray(64)
    w32 = _words(buf, 0, 2, 4)
    with pytest.raises(IndexError):
        w32.load(2)
    with pytest.raises(IndexError):
        w32.store(-1, 0)
    with pytest.raises(OverflowError):
        w32.store(0, 1 << 32)
    with pytest.raises(ValueError, match="differ in length"):
        w32.scatter([0, 1], [1])
    with pytest.raises(ValueError, match="aligned"):
        _words(buf, 2, 1, 4)
    with pytest.raises(ValueError, match="width"):
        Words(ctypes.addressof(ctypes.c_char.from_buffer(buf)), 1, 2)
    w32.release()
    with pytest.raises(ValueError, match="released"):
        w32.clear()
