"""Python handlers served on a GPU (issue 53): example_app's Python twins and its lookup-table
decoder through the Python API, and the notebook path (a function defined here, compiled,
linked and served with no build step). Every response byte of 10,000 round trips per handler
is checked.

Needs a CUDA GPU, example_app installed (``pip install ./example_app``, whose build compiles
``src/py_handlers.py`` with numba-cuda) and, for the notebook path, numba-cuda with NVVM no
newer than the installed nvJitLink (``skbuild-cudaq[numba]``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

ROUND_TRIPS = 10_000
WINDOW = 16
DEADLINE = 30.0
#: The Steane code's lookup table (example_app/src/py_handlers.py): syndrome s flips qubit s.
STEANE = [0] + [1 << (s - 1) for s in range(1, 8)]


def increment(payload: bytes) -> bytes:
    return bytes((b + 1) & 0xFF for b in payload)


def steane(payload: bytes) -> bytes:
    return b"".join(bytes([STEANE[b & 7], STEANE[(b >> 3) & 7]]) for b in payload)


def serve(client: Any, name: str, make: Callable[[random.Random], bytes], answer: Any) -> None:
    """ROUND_TRIPS requests to ``name``, WINDOW in flight, each response checked."""
    rng = random.Random(name)
    pending: list[tuple[Any, bytes]] = []

    def check(ticket: Any, payload: bytes) -> None:
        resp = client.wait(ticket, timeout=DEADLINE)
        assert (resp.status, resp.result) == (0, answer(payload)), (name, payload)

    for _ in range(ROUND_TRIPS):
        payload = make(rng)
        pending.append((client.submit(name, payload), payload))
        if len(pending) >= WINDOW:
            check(*pending.pop(0))
    for ticket, payload in pending:
        check(ticket, payload)


def random_bytes(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(0, 200))


def syndromes(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(0, 100))


TWINS: list[tuple[str, Callable[[random.Random], bytes], Callable[[bytes], bytes]]] = [
    ("py_rpc_increment", random_bytes, increment),
    ("py_rpc_increment_thread", random_bytes, increment),
    ("py_steane_decode", syndromes, steane),
]


@pytest.mark.parametrize(
    "kernel", ["builtin", "single_thread_dispatcher", "py_single_thread_dispatcher"]
)
def test_example_apps_python_handlers_answer_10000_checked_requests_each(
    core: Any, kernel: str
) -> None:
    from example_app import launchers
    from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig, get_device_handler

    config = DispatcherConfig(num_slots=64, slot_size=256, stop_timeout=DEADLINE)
    with Dispatcher(config, module=core) as d:
        for name, _, _ in TWINS:
            d.function_table.add_device(name, get_device_handler(core, name))
        if kernel != "builtin":
            d.set_unified_launch(launchers.LAUNCHERS[kernel](core))
        d.start()
        client = d.bridge.client()
        for name, make, answer in TWINS:
            serve(client, name, make, answer)
        # a result that does not fit (two bytes per syndrome, 232 of room): the handler's
        # own status, status(1)
        assert client.call("py_steane_decode", bytes(200), timeout=DEADLINE) == (1, b"")
        assert d.stop() == ROUND_TRIPS * len(TWINS) + 1


def test_a_notebook_handler_is_compiled_linked_and_served_with_no_build_step(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        load_nvidia_dynamic_lib("nvvm")
    except Exception as exc:  # any failure to find NVVM is a skip here
        pytest.skip(f"no NVVM (pip install 'nvidia-nvvm==13.0.*'): {exc}")
    import numpy as np

    from skbuild_cudaq.numba import device_binary, thread_handler, words
    from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig, get_device_handler
    from skbuild_cudaq.realtime.library.registry import release_library

    monkeypatch.setenv("SKBUILD_CUDAQ_PYTHON_DEVICE_DIR", str(tmp_path))

    @thread_handler
    def py_notebook_reverse(args, result):  # type: ignore[no-untyped-def]
        n = args.size
        for i in range(n):
            result[i] = args[n - 1 - i]
        return n

    @thread_handler(args="uint32", result="uint32")
    def py_notebook_words(args, result):  # type: ignore[no-untyped-def]
        # the whole 8-byte words reversed, then the 4-byte element after the last one
        src, dst = words(args), words(result)
        n = np.uint32(src.size)
        for i in range(n):
            dst[i] = src[n - 1 - i]
        for k in range(2 * n, args.size):
            result[k] = args[k]
        return args.size

    def reversed_words(payload: bytes) -> bytes:
        whole = len(payload) // 8 * 8
        chunks = [payload[i : i + 8] for i in range(0, whole, 8)]
        return b"".join(reversed(chunks)) + payload[whole : len(payload) // 4 * 4]

    release_library()  # another test's module may be linked in this process
    binary = str(device_binary(py_notebook_reverse, py_notebook_words))
    config = DispatcherConfig(num_slots=64, slot_size=256, stop_timeout=DEADLINE)
    try:
        with Dispatcher(config, module=binary) as d:
            for name in ("py_notebook_reverse", "py_notebook_words"):
                d.function_table.add_device(name, get_device_handler(binary, name))
            d.start()
            serve(d.bridge.client(), "py_notebook_reverse", random_bytes, lambda p: p[::-1])
            serve(d.bridge.client(), "py_notebook_words", random_bytes, reversed_words)
            assert d.stop() == 2 * ROUND_TRIPS
    finally:
        release_library()


def test_the_python_dispatch_kernel_serves_cpp_handlers_too(core: Any) -> None:
    """py_single_thread_dispatcher (a kernel written in Python) with example_app's C++
    handlers: every response checked."""
    from example_app import launchers
    from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig, get_device_handler

    config = DispatcherConfig(num_slots=64, slot_size=256, stop_timeout=DEADLINE)
    with Dispatcher(config, module=core) as d:
        for name in ("rpc_increment", "rpc_increment_thread", "echo"):
            d.function_table.add_device(name, get_device_handler(core, name))
        d.set_unified_launch(launchers.py_single_thread(core))
        d.start()
        client = d.bridge.client()
        serve(client, "rpc_increment", random_bytes, increment)
        serve(client, "rpc_increment_thread", random_bytes, increment)
        serve(client, "echo", random_bytes, lambda p: p)
        from skbuild_cudaq.realtime.wire import STATUS_UNKNOWN_FUNCTION

        status, _ = client.call("not_in_the_table", b"x", timeout=DEADLINE)
        assert status == STATUS_UNKNOWN_FUNCTION
        assert d.stop() == 3 * ROUND_TRIPS + 1


def test_the_test_server_serves_the_python_dispatcher_over_udp() -> None:
    """cudaq-realtime-test-server --path=device --dispatcher=py_single_thread_dispatcher over
    UDP: 10,000 checked requests to each Python handler, bad requests answered."""
    import importlib.util

    if importlib.util.find_spec("example_app") is None:
        pytest.skip("example_app is not installed (pip install ./example_app)")
    from test_server import _check_bad_requests, start_server

    server = start_server(
        "--path=device",
        "--module=example_app._core",
        "--handlers=py_rpc_increment,py_rpc_increment_thread,py_steane_decode,echo",
        "--dispatcher=py_single_thread_dispatcher",
        "--grid=1",
        "--block=1",
        "--num-slots=16",
        "--slot-size=256",
    )
    try:
        sent = 0
        with server.client() as c:
            for name, make, answer in TWINS:
                rng = random.Random(name)
                for start in range(0, ROUND_TRIPS, 500):
                    payloads = [make(rng) for _ in range(min(500, ROUND_TRIPS - start))]
                    tickets = [c.submit(name, p) for p in payloads]
                    for p, r in zip(payloads, c.collect(tickets), strict=True):
                        assert (r.status, r.result) == (0, answer(p)), (name, p)
                    sent += len(payloads)
        sent += _check_bad_requests(server)
        processed, counters, _ = server.stop()
        assert processed == sent and counters["answered"] == sent
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.communicate()
