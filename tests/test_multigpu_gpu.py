"""Several GPUs in one process: per-device lookups, N dispatchers, failures kept to one GPU.

Needs two CUDA GPUs (``gpu`` marker; skipped with the number found on machines with
fewer) and example_app installed. Every test prints what it saw (devices,
architectures, handler addresses, counts, timings) so a failure on the one
two-GPU run can be diagnosed from the log: run with ``-rA`` (or ``-s``) to see it
for passing tests too. Every wait has a deadline: nothing here can hang.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

DEADLINE = 60.0  # seconds any thread may take
# launch-wide and thread-shaped handlers, as in tests/test_dispatcher_gpu.py
HANDLERS = ("rpc_increment", "echo", "block_reverse", "rpc_increment_thread", "echo_thread")
KINDS = ["builtin", "single_thread", "warp_parallel"]


def say(*parts: Any) -> None:
    print("[multigpu]", *parts, flush=True)


@pytest.fixture(scope="module")
def two_gpus(core: Any) -> list[int]:
    from skbuild_cudaq.realtime import _driver

    count = _driver.device_count()
    if count < 2:
        pytest.skip(f"needs 2 CUDA GPUs, this machine has {count}")
    drv = _driver.driver()
    for device in (0, 1):
        dev = _driver.check(drv.cuDeviceGet(device), "cuDeviceGet")
        name = bytes(_driver.check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName"))
        name = name.split(b"\0", 1)[0]
        say(f"device {device}: {name.decode()} {_driver.ordinal_arch(device)}")
    return [0, 1]


@pytest.fixture
def fresh(two_gpus: list[int]) -> Iterator[None]:
    """Each test links (or takes from the cache) from scratch, and leaves nothing linked."""
    import skbuild_cudaq.realtime as rt

    rt.release_library()
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # two Python producers share the GIL: hand it over often
    yield
    sys.setswitchinterval(previous)
    rt.release_library()


def _ring_tools() -> Any:
    """RawRing, pipelined and expected of the one-GPU tests (the documented ring layout)."""
    import test_dispatcher_gpu

    return test_dispatcher_gpu


def make_dispatcher(
    core: Any, device: int, kind: str, *, handlers_from: dict[str, int] | None = None
) -> Any:
    """A dispatcher on ``device``; ``handlers_from`` looks a handler up on another device."""
    from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig, get_device_handler

    d = Dispatcher(
        DispatcherConfig(device=device, num_slots=64, slot_size=1024, stop_timeout=20.0),
        module=core,
    )
    for name in HANDLERS:
        where = (handlers_from or {}).get(name, device)
        d.function_table.add_device(name, get_device_handler(core, name, device=where))
    if kind != "builtin":
        from example_app import launchers

        d.set_unified_launch(launchers.LAUNCHERS[kind](core, device=device))
    return d


class _current:
    """Make ``device``'s primary context current for a block (lookups without device=)."""

    def __init__(self, device: int) -> None:
        from skbuild_cudaq.realtime import _driver

        self._cm = _driver.pushed(_driver.primary_context(device))

    def __enter__(self) -> None:
        self._cm.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(*exc)


def random_traffic(seed: int, room: int, count: int) -> Callable[[int], tuple[str, bytes]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, room + 1, size=count)
    sizes[:3] = (0, 1, room)
    names = rng.integers(0, len(HANDLERS), size=count)
    data = rng.integers(0, 256, size=2 * room, dtype=np.uint8).tobytes()

    def make(k: int) -> tuple[str, bytes]:
        start = k % 97
        return HANDLERS[names[k]], data[start : start + int(sizes[k])]

    return make


class Traffic(threading.Thread):
    """Keeps one dispatcher's ring busy with byte-checked requests until told to stop."""

    def __init__(self, dispatcher: Any, name: str, limit: int | None = None, seed: int = 0) -> None:
        super().__init__(name=name, daemon=True)
        tools = _ring_tools()
        self.tools = tools
        self.ring = tools.RawRing(dispatcher.bridge)
        self.room = dispatcher.config.max_payload
        self.limit = limit
        self.halt = threading.Event()
        self.failure: BaseException | None = None
        self.errors = 0
        self.started_at = self.finished_at = 0.0
        self.make = None if limit is None else random_traffic(seed, self.room, limit)

    def payload(self, k: int) -> tuple[str, bytes]:
        if self.make is not None:
            return self.make(k)
        return HANDLERS[k % len(HANDLERS)], bytes([k % 251]) * (k % 200)

    def run(self) -> None:
        tools, ring = self.tools, self.ring
        sent: dict[int, tuple[str, bytes]] = {}
        self.started_at = time.monotonic()
        try:
            while not self.halt.is_set() and (self.limit is None or ring.done < self.limit):
                while ring.sent - ring.done < ring.n and (
                    self.limit is None or ring.sent < self.limit
                ):
                    name, payload = self.payload(ring.sent)
                    sent[ring.submit(tools.fnv1a(name), payload)] = (name, payload)
                k = ring.done
                status, rid, result, ptp = ring.collect(k, deadline=20.0)
                name, payload = sent.pop(k)
                want = (0, k, 0x1122334455667788 + k, tools.expected(name, payload))
                if (status, rid, ptp, result) != want:
                    self.errors += 1
                    if self.errors < 5:
                        say(
                            f"{self.name}: request {k} {name} len {len(payload)}: got status "
                            f"{status} id {rid} result len {len(result)}"
                        )
            # collect what is still in flight, so the count is exact
            while ring.done < ring.sent:
                k = ring.done
                status, rid, result, ptp = ring.collect(k, deadline=20.0)
                name, payload = sent.pop(k)
                if (status, rid, result) != (0, k, tools.expected(name, payload)):
                    self.errors += 1
        except BaseException as exc:  # reported by the main thread
            self.failure = exc
        self.finished_at = time.monotonic()

    def finish(self) -> None:
        self.halt.set()
        self.join(DEADLINE)
        assert not self.is_alive(), f"{self.name} did not finish within {DEADLINE} s"
        assert self.failure is None, f"{self.name}: {self.failure!r}"
        assert self.errors == 0, f"{self.name}: {self.errors} wrong responses"

    @property
    def rate(self) -> float:
        return self.ring.done / max(self.finished_at - self.started_at, 1e-9)


# -- lookups per device ---------------------------------------------------------------------------


def test_lookups_per_device(core: Any, fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import skbuild_cudaq.realtime as rt
    from skbuild_cudaq.realtime import _driver
    from skbuild_cudaq.realtime.link import linker as link_module

    links: list[str] = []
    real = link_module.link_device_code

    def counted(binary: Any, options: Any = None, *, cache: Any = None) -> Any:
        result = real(binary, options, cache=cache)
        links.append(result.arch)
        return result

    monkeypatch.setattr(link_module, "link_device_code", counted)
    archs = [_driver.ordinal_arch(d) for d in (0, 1)]
    addresses = {d: {n: rt.get_device_handler(core, n, device=d) for n in HANDLERS} for d in (0, 1)}
    kernels = {d: rt.get_device_kernel(core, "single_thread_dispatcher", device=d) for d in (0, 1)}
    say("archs", archs, "links", links)
    for d in (0, 1):
        say(f"device {d} handlers", {n: hex(a) for n, a in addresses[d].items()})
    assert sorted(links) == sorted(set(archs)), "one link per architecture"
    assert sorted(rt.library.loaded_libraries()) == sorted(set(archs))
    if archs[0] == archs[1]:
        assert kernels[0].library is kernels[1].library  # one module serves both GPUs
    for name in HANDLERS:
        # A device function's value is an index into its module's function table: the
        # same on every GPU of one cubin (seen on two H200s). What tells the GPUs apart
        # is the device each lookup remembers.
        if archs[0] == archs[1]:
            assert int(addresses[0][name]) == int(addresses[1][name]), name
        assert (addresses[0][name].device, addresses[1][name].device) == (0, 1)
    for d in (0, 1):
        lib = kernels[d].library
        assert all(lib.contains(a, device=d) for a in addresses[d].values())
        # a function per context; the occupancy calculator answers on each GPU
        func = kernels[d].function(device=d)
        with _current(d):
            blocks = _driver.check(
                _driver.driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(func, 1, 0),
                "occupancy",
            )
            assert int(blocks) >= 1
            # lookups without device= follow the current context
            assert rt.get_device_handler(core, "echo") == addresses[d]["echo"]


# -- the cross-device handler refusal ---------------------------------------------------------


def test_a_handler_of_the_other_gpu_is_refused_at_start(core: Any, fresh: None) -> None:
    import skbuild_cudaq.realtime as rt

    say("echo on device 0", hex(rt.get_device_handler(core, "echo", device=0)))
    say("echo on device 1", hex(rt.get_device_handler(core, "echo", device=1)))
    with make_dispatcher(core, 0, "single_thread", handlers_from={"echo": 1}) as d:
        with pytest.raises(rt.InvalidArgumentError) as info:
            d.start()
        say("refused:", info.value)
        assert "looked up on another GPU" in str(info.value)
        assert "get_device_handler(..., device=1)" in str(info.value)
        assert not d.running
    # the right address serves
    with make_dispatcher(core, 0, "single_thread") as d:
        d.start()
        status, result = d.bridge.client().call("echo", b"device 0")
        assert (status, bytes(result)) == (0, b"device 0")
        assert d.stop() == 1


# -- two dispatchers at once ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_two_dispatchers_serve_100k_checked_rpcs_each_at_once(
    core: Any, fresh: None, kind: str
) -> None:
    count = 100_000
    with make_dispatcher(core, 0, kind) as d0, make_dispatcher(core, 1, kind) as d1:
        d0.start()
        d1.start()
        say(kind, "launch args", d0.launch_args, d1.launch_args)
        traffic = [
            Traffic(d, f"gpu{i}-{kind}", limit=count, seed=1234 + i) for i, d in enumerate((d0, d1))
        ]
        for t in traffic:
            t.start()
        for t in traffic:
            t.join(3 * DEADLINE)
        for t in traffic:
            say(
                f"{t.name}: {t.ring.done} checked in {t.finished_at - t.started_at:.2f} s "
                f"({t.rate / 1e3:.1f} k/s), errors {t.errors}, failure {t.failure!r}"
            )
        for t in traffic:
            t.finish()
        # they served at the same time: each started before the other finished
        assert traffic[0].started_at < traffic[1].finished_at
        assert traffic[1].started_at < traffic[0].finished_at
        processed = (d0.processed, d1.processed)
        say(kind, "processed", processed)
        assert processed == (count, count)
        assert (d0.stop(), d1.stop()) == (count, count)


def test_stop_and_restart_one_while_the_other_serves(core: Any, fresh: None) -> None:
    with (
        make_dispatcher(core, 0, "single_thread") as d0,
        make_dispatcher(core, 1, "warp_parallel") as d1,
    ):
        d1.start()  # started and stopped in any order
        d0.start()
        t0, t1 = Traffic(d0, "gpu0"), Traffic(d1, "gpu1")
        t0.start()
        t1.start()
        time.sleep(0.5)
        t0.finish()
        before = d1.processed
        stopped = d0.stop()
        say("gpu0 stopped at", stopped, "answered", t0.ring.done, "gpu1 at", before)
        assert stopped == t0.ring.done > 0
        assert not d0.running and d1.running
        time.sleep(0.5)
        during = d1.processed
        say("gpu1 after 0.5 s more", during)
        assert during > before, "device 1 stopped serving when device 0 stopped"
        # device 0 starts again (a fresh ring) while device 1 still serves
        d0.start()
        t0 = Traffic(d0, "gpu0-again", limit=5_000)
        t0.start()
        t0.join(DEADLINE)
        t0.finish()
        assert d0.stop() == 5_000
        t1.finish()
        assert d1.stop() == t1.ring.done
        assert d1.processed > during


class FailingAfterLaunch:
    """A launcher whose kernel is enqueued on its GPU, then it raises (or raises at once)."""

    def __init__(self, inner: Any, when: str) -> None:
        self.inner, self.when = inner, when
        self.library = inner.library

    def __call__(self, args: Any) -> bool:
        if self.when == "before":
            raise RuntimeError("refusing before the launch")
        self.inner(args)
        raise RuntimeError("failing after the launch")


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_failing_launcher_on_one_gpu_leaves_the_other_serving(
    core: Any, fresh: None, when: str
) -> None:
    from skbuild_cudaq.realtime import RealtimeError

    with (
        make_dispatcher(core, 0, "single_thread") as d0,
        make_dispatcher(core, 1, "single_thread") as d1,
    ):
        d1.start()
        t1 = Traffic(d1, "gpu1")
        t1.start()
        time.sleep(0.2)
        good = d0._launcher
        d0.set_unified_launch(FailingAfterLaunch(good, when))
        with pytest.raises(RealtimeError, match=f"(failing|refusing) {when}") as info:
            d0.start()
        say("device 0 start failed as planned:", info.value)
        assert not d0.running and d1.running
        before = d1.processed
        time.sleep(0.3)
        after = d1.processed
        say("device 1 processed", before, "->", after)
        assert after > before, "device 1 stopped serving when device 0's launcher failed"
        # device 0 serves with a good launcher, device 1 still serving
        d0.set_unified_launch(good)
        d0.start()
        t0 = Traffic(d0, "gpu0", limit=2_000)
        t0.start()
        t0.join(DEADLINE)
        t0.finish()
        assert d0.stop() == 2_000
        t1.finish()
        assert d1.stop() == t1.ring.done


FAULT_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import skbuild_cudaq.realtime as rt
    from example_app import _core, launchers

    def make(device):
        d = rt.Dispatcher(rt.DispatcherConfig(device=device, num_slots=64, slot_size=256),
                          module=_core)
        d.function_table.add_device("echo", rt.get_device_handler(_core, "echo", device=device))
        d.set_unified_launch(launchers.single_thread(_core, device=device))
        return d

    d1 = make(1)
    d1.start()
    c1 = d1.bridge.client()
    assert c1.call("echo", b"before")[0] == 0
    d0 = make(0)
    # a transport context at an unmapped address: the kernel faults reading it
    d0.set_unified_launch(launchers.single_thread(_core, device=0), transport_ctx=0x10)
    try:
        d0.start()
        time.sleep(0.2)  # should the fault come after start()'s check, stop() reports it
        d0.stop()
    except rt.RealtimeError as exc:
        print("device 0 failed:", exc, flush=True)
    else:
        print("device 0 did not fail", flush=True)
        sys.exit(3)
    for i in range(1000):
        status, result = c1.call("echo", bytes([i % 256]) * 16)
        assert (status, bytes(result)) == (0, bytes([i % 256]) * 16), (i, status)
    print("device 1 answered", 1000 + 1, flush=True)
    # A kernel fault is sticky for the whole process (CUDA: "any further CUDA work will
    # return the same error"): device 1 kept serving without CUDA calls, but stopping it
    # is CUDA work and reports device 0's fault; the process must be restarted.
    try:
        d1.stop()
    except rt.CUDAError as exc:
        print("device 1 stop after the fault:", exc, flush=True)
    else:
        print("device 1 stop after the fault: ok", flush=True)
    """
)


def test_a_kernel_fault_on_one_gpu_leaves_the_other_serving(core: Any, two_gpus: list[int]) -> None:
    """In a child process: a kernel fault on device 0 leaves device 1's kernel serving (CUDA
    makes the fault sticky for the process: restart it to use CUDA again)."""
    proc = subprocess.run(
        [sys.executable, "-c", FAULT_SCRIPT],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    say("child stdout:", proc.stdout.strip())
    say("child stderr:", proc.stderr.strip()[-2000:])
    assert proc.returncode == 0, proc.stderr
    assert "device 0 failed:" in proc.stdout
    assert "device 1 answered 1001" in proc.stdout  # served the first call and 1,000 after
    assert "device 1 stop after the fault:" in proc.stdout


# -- the test server and the example on several GPUs ------------------------------------------


def test_test_server_serves_every_gpu_on_its_own_port(core: Any, two_gpus: list[int]) -> None:
    import re
    import select
    import signal

    from skbuild_cudaq.realtime.host.udp import UdpClient

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "skbuild_cudaq.cli.server",
            "--path=device",
            "--devices=all",
            "--dispatcher=single_thread_dispatcher",
            "--num-slots=8",
            "--slot-size=256",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    try:
        assert proc.stdout is not None
        line = ""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not line.startswith("CUDAQ_REALTIME_SERVER_READY"):
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line = proc.stdout.readline()
                if not line:
                    break
            elif proc.poll() is not None:
                break
        say("ready line:", line.strip())
        m = re.search(r"host=(\S+) port=(\d+) .* devices=([\d,]+) ports=([\d,]+)$", line.strip())
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        devices = [int(d) for d in m[3].split(",")]
        ports = [int(p) for p in m[4].split(",")]
        assert len(devices) == len(ports) >= 2 and len(set(ports)) == len(ports)
        assert int(m[2]) == ports[0]
        sent = []
        for port in ports:
            with UdpClient(m[1], port, timeout=30) as client:
                tickets = [
                    client.submit("rpc_increment", bytes([i % 256, port % 256]) * 8, request_id=i)
                    for i in range(300)
                ]
                for i, r in enumerate(client.collect(tickets)):
                    want = bytes([(i + 1) % 256, (port + 1) % 256]) * 8
                    assert (r.status, r.result) == (0, want), (port, i)
            sent.append(300)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        say("exit stdout:", out.strip())
        assert proc.returncode == 0, err
        last = out.strip().splitlines()[-1]
        assert last == f"CUDAQ_REALTIME_SERVER_PROCESSED count={sum(sent)} counts=" + ",".join(
            map(str, sent)
        )
        bridges = [ln for ln in out.splitlines() if ln.startswith("CUDAQ_REALTIME_SERVER_BRIDGE")]
        assert [ln.split()[1] for ln in bridges] == [f"device={d}" for d in devices]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_the_example_runs_on_every_gpu(core: Any, two_gpus: list[int]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "example_app", "--devices", "all", "--calls", "2000"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    say("example stdout:", proc.stdout.strip(), "stderr:", proc.stderr.strip()[-2000:])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) >= 2
    for device, line in enumerate(lines):
        assert line.startswith(f"device {device}: 2000 requests answered"), line
