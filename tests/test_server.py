"""Two-process tests: pytest starts the test server (``python -m
skbuild_cudaq.cli.server``) and talks to it over UDP."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import re
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from skbuild_cudaq.realtime.host.udp import UdpClient
from skbuild_cudaq.realtime.ring import RingLayout
from skbuild_cudaq.realtime.wire import (
    STATUS_BAD_MAGIC,
    STATUS_UNKNOWN_FUNCTION,
    encode_request,
)

READY = re.compile(
    r"^CUDAQ_REALTIME_SERVER_READY transport=udp host=(?P<host>\S+) port=(?P<port>\d+) "
    r"path=(?P<path>\w+) dispatch=unified dispatcher=(?P<dispatcher>\w+) "
    r"slots=(?P<slots>\d+) slot_size=(?P<slot_size>\d+)$"
)
STARTUP_TIMEOUT = 120.0  # the device path links with nvJitLink on first use


@dataclass
class Server:
    proc: subprocess.Popen[str]
    host: str
    port: int
    num_slots: int
    slot_size: int
    ready_line: str

    def client(self) -> UdpClient:
        return UdpClient(self.host, self.port, timeout=30)

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, dict[str, int], str]:
        """Signal, wait; returns (processed count, bridge counters, stderr)."""
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return _parse_exit(out, err)


def _parse_exit(out: str, err: str) -> tuple[int, dict[str, int], str]:
    lines = out.splitlines()
    assert re.fullmatch(r"CUDAQ_REALTIME_SERVER_PROCESSED count=\d+", lines[-1]), (out, err)
    bridge = [line for line in lines if line.startswith("CUDAQ_REALTIME_SERVER_BRIDGE ")]
    counters = dict(kv.split("=") for kv in bridge[-1].split()[1:]) if bridge else {}
    return int(lines[-1].split("=")[1]), {k: int(v) for k, v in counters.items()}, err


def start_server(*args: str) -> Server:
    proc = subprocess.Popen(
        [sys.executable, "-m", "skbuild_cudaq.cli.server", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            m = READY.match(line.rstrip("\n"))
            if m:
                return Server(
                    proc,
                    m["host"],
                    int(m["port"]),
                    int(m["slots"]),
                    int(m["slot_size"]),
                    line.rstrip("\n"),
                )
        elif proc.poll() is not None:
            break
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(f"server did not become ready:\nstdout: {out}\nstderr: {err}")


@pytest.fixture
def host_server() -> Iterator[Server]:
    server = start_server("--path=host", "--num-slots=8", "--slot-size=256")
    yield server
    if server.proc.poll() is None:
        server.proc.kill()
        server.proc.communicate()


def _check_echo_increment(server: Server, count: int, seed: int) -> int:
    """Random payloads through echo and rpc_increment, byte-checked; returns requests sent."""
    rng = random.Random(seed)
    max_payload = server.slot_size - 24
    with server.client() as c:
        payloads = [rng.randbytes(rng.randint(0, max_payload)) for _ in range(count)]
        payloads[:2] = [b"", bytes(range(256))[:max_payload]]
        for p in payloads[:20]:
            assert c.call("echo", p) == (0, p)
            assert c.call("rpc_increment", p) == (0, bytes((b + 1) % 256 for b in p))
        # a burst of three ring wraps (and a bit), everything in flight
        burst = payloads[: 3 * server.num_slots + 3]
        tickets = c.submit_many([("rpc_increment", p) for p in burst])
        responses = c.collect(tickets)
        assert [r.request_id for r in responses] == [t.request_id for t in tickets]
        assert [r.status for r in responses] == [0] * len(burst)
        assert [r.result for r in responses] == [bytes((b + 1) % 256 for b in p) for p in burst]
        return 40 + len(burst)


def _check_bad_requests(server: Server) -> int:
    with server.client() as c:
        bad_magic = c.submit("echo", b"abc", request_id=0xABCD0001, magic=0x12345678)
        unknown = c.submit("no_such_handler", b"abc", request_id=0xABCD0002, timestamp=99)
        r1, r2 = c.collect([bad_magic, unknown])
        assert (r1.status, r1.request_id, r1.result) == (STATUS_BAD_MAGIC, 0xABCD0001, b"")
        assert (r2.status, r2.request_id, r2.header.ptp_timestamp) == (
            STATUS_UNKNOWN_FUNCTION,
            0xABCD0002,
            99,
        )
        assert c.call("echo", b"after") == (0, b"after")
    return 3


def test_host_path_two_process(host_server: Server) -> None:
    assert "path=host" in host_server.ready_line and "dispatcher=builtin" in host_server.ready_line
    sent = _check_echo_increment(host_server, 64, seed=1)
    sent += _check_bad_requests(host_server)
    processed, counters, _ = host_server.stop()
    assert processed == sent
    assert counters["forwarded"] == counters["answered"] == sent
    assert counters["rejected"] == counters["dropped"] == 0


def test_host_path_fuzz(host_server: Server) -> None:
    rng = random.Random(7)
    max_size = host_server.slot_size + 64
    good = 0
    with host_server.client() as c:
        for chunk in range(100):
            for _ in range(100):
                kind = rng.random()
                if kind < 0.3:  # garbage of any length
                    data = rng.randbytes(rng.randint(0, max_size))
                else:  # a plausible header with random fields
                    arg_len = rng.choice([rng.randint(0, max_size), 2**32 - 1, 0])
                    data = encode_request(
                        rng.choice(["echo", "rpc_increment", rng.getrandbits(32)]),
                        rng.randbytes(rng.randint(0, max_size - 24)),
                        request_id=rng.getrandbits(32),
                        timestamp=rng.getrandbits(64),
                        magic=rng.choice([0x43555152, rng.getrandbits(32)]),
                        arg_len=None if kind < 0.7 else arg_len,
                    )
                c.send_raw(data)
            # a good request after every 100 fuzzed datagrams: the server is alive and
            # has read everything sent before it (one socket, in order)
            marker = 2**63 + chunk
            t = c.submit("rpc_increment", bytes([chunk]), request_id=chunk, timestamp=marker)
            assert c.wait(t).result == bytes([chunk + 1])
            good += 1
            c.discard()
    processed, counters, _ = host_server.stop()
    assert counters["received"] == 10_000 + good
    dropped = ("dropped", "dropped_responses", "dropped_own_address")
    assert counters["received"] == (
        counters["forwarded"] + counters["rejected"] + sum(counters[k] for k in dropped)
    )
    assert processed == counters["forwarded"] == counters["answered"]
    assert counters["dropped"] > 0 and counters["rejected"] > 0


def test_timeout_stops_the_server() -> None:
    """``--timeout=S``: the server stops by itself, exit 0, counting what it answered: the
    call below, if it came within the 2 s (on a loaded machine it may not: then none)."""
    server = start_server("--path=host", "--timeout=2")
    answered = 0
    with server.client() as c:  # its 30 s: an answer, if any, comes before the server exits
        try:
            assert c.call("echo", b"x") == (0, b"x")
            answered = 1
        except TimeoutError:
            pass  # the server had stopped before the request came
    out, err = server.proc.communicate(timeout=60)
    assert server.proc.returncode == 0, err
    assert _parse_exit(out, err)[0] == answered


def test_sigint_stops_the_server() -> None:
    server = start_server("--path=host", "--num-slots=4", "--slot-size=64", "--handlers=echo")
    assert "slots=4 slot_size=64" in server.ready_line
    with server.client() as c:
        assert c.call("echo", b"x") == (0, b"x")
        assert c.call("rpc_increment", b"x")[0] == STATUS_UNKNOWN_FUNCTION
    assert server.stop(signal.SIGINT)[0] == 2


def test_host_ring_transport() -> None:
    from skbuild_cudaq.realtime import connect_host_ring

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "skbuild_cudaq.cli.server",
            "--path=host",
            "--transport=host-ring",
            "--num-slots=4",
            "--slot-size=64",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.match(
            r"CUDAQ_REALTIME_SERVER_READY transport=host-ring shm=(\S+) path=host .*"
            r"slots=4 slot_size=64$",
            line.strip(),
        )
        assert m, line
        client = connect_host_ring(m[1], 4, 64)
        payloads = [os.urandom(n) for n in range(0, 41, 4)]
        tickets = client.submit_many([("rpc_increment", p) for p in payloads])
        got = [r.result for r in client.collect(tickets)]
        assert got == [bytes((b + 1) % 256 for b in p) for p in payloads]
        client.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert out.splitlines()[-1] == f"CUDAQ_REALTIME_SERVER_PROCESSED count={len(payloads)}"
        assert not (Path("/dev/shm") / m[1].lstrip("/")).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--path=gpu"], "--path"),
        (["--path=host", "--slot-size=100"], "slot_size must be a multiple of 8"),
        (["--path=host", "--num-slots=0"], "positive integer"),
        (["--path=host", "--grid=0"], "X[,Y,Z]"),
        (["--path=host", "--handlers=nope"], "unknown: nope"),
        (["--path=host", "--dispatcher=single_thread_dispatcher"], "no dispatch kernels"),
        (["--path=device", "--transport=host-ring"], "use --transport=udp"),
        (["--path=host", "--transport=host-ring", "--graphs=g"], "--graphs needs --transport=udp"),
        (["--path=host", "--port=70000"], "port"),
        (["--path=host", "--device=1"], "--device selects a GPU: it needs --path=device"),
        (["--path=host", "--devices=all"], "--devices serves several GPUs"),
        (["--device=0", "--devices=0,1"], "not both"),
        (["--devices=0,0"], "distinct device ordinals"),
        (["--devices=1,x"], "distinct device ordinals"),
        (["--device=-1"], "expected a CUDA device ordinal"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq.cli.server", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_version_and_help_on_every_option() -> None:
    """``--version`` prints one line and serves nothing; ``--help`` describes every option,
    none left bare (issue 56)."""
    import argparse

    from skbuild_cudaq import __version__
    from skbuild_cudaq.cli import server as test_server

    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq.cli.server", "--version", "--path=host"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == f"cudaq-realtime-test-server (skbuild-cudaq) {__version__}\n"
    parser = test_server._build_parser()
    options = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    assert len(options) > 20
    bare = [a.option_strings[0] for a in options if not (a.help and a.help.strip())]
    assert bare == [], f"options without help text: {bare}"


# -- rings too large to allocate (issue 11): one line, nothing leaked --------------------------

RING_TOO_LARGE = ["--num-slots=2000000000", "--slot-size=1000000"]  # 4 PB


def _total(num_slots: int, slot_size: int) -> int:
    """What the server reports for a ring: slots, flags and the ring's request-id counter."""
    return RingLayout(num_slots, slot_size).total_bytes


@pytest.mark.parametrize("transport", ["udp", "host-ring"])
def test_ring_larger_than_memory_is_refused_up_front(transport: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq.cli.server", "--path=host",
         f"--transport={transport}", *RING_TOO_LARGE, "--timeout=5"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    where = "free in /dev/shm" if transport == "host-ring" else "of physical memory"
    assert re.fullmatch(
        r"skbuild-cudaq: error: cudaq-realtime-test-server: --num-slots/--slot-size: the ring "
        r"needs more memory than there is \(2000000000 slots of 1000000 bytes: "
        rf"{_total(2_000_000_000, 1_000_000)} bytes with the flags; \d+ bytes {where}\); use "
        r"fewer or smaller "
        r"slots\n",
        proc.stderr,
    ), proc.stderr


# Runs the server with its address space limited to what it has mapped plus a margin, so that
# an allocation fails for real (MemoryError from Python, ENOMEM from mmap) with a ring that
# fits in physical memory and in /dev/shm: the up-front check passes, the allocation does not.
_LIMITED = """
import re, resource, sys
import multiprocessing.shared_memory, skbuild_cudaq.realtime.host.dispatcher
import skbuild_cudaq.cli.server as server
status = open("/proc/self/status").read()
mapped = int(re.search(r"VmSize:\\s+(\\d+) kB", status).group(1)) * 1024
limit = mapped + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.exit(server.main(sys.argv[2:]))
"""
SLOTS = 1 << 24  # with 32-byte slots: a 1.2 GB ring, 134 MB of per-slot bookkeeping
RING_BYTES = RingLayout(SLOTS, 32).total_bytes  # slots, flags and the request-id counter


@pytest.mark.parametrize(
    ("transport", "margin", "message"),
    [
        pytest.param(
            "udp",
            RING_BYTES // 2,
            "cannot allocate the ring and its bookkeeping",
            id="in-process-ring",
        ),
        pytest.param(
            "host-ring",
            RING_BYTES // 2,
            "cannot create the shared-memory ring",
            id="shared-ring-mmap",
        ),
        pytest.param(  # the ring maps, the client's per-slot list does not: views exist
            "host-ring",
            RING_BYTES + 48_000_000,
            "cannot allocate the ring and its bookkeeping",
            id="shared-ring-bookkeeping",
        ),
    ],
)
def test_ring_too_large_to_allocate_is_one_line_and_leaks_nothing(
    transport: str, margin: int, message: str
) -> None:
    if sys.platform != "linux":
        pytest.skip("needs /proc and RLIMIT_AS")
    proc = subprocess.run(
        [sys.executable, "-c", _LIMITED, str(margin), "--path=host", f"--transport={transport}",
         f"--num-slots={SLOTS}", "--slot-size=32", "--timeout=5"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    reason = "out of memory" if "bookkeeping" in message else "Cannot allocate memory"
    assert proc.stderr == (
        f"skbuild-cudaq: error: cudaq-realtime-test-server: {message} ({SLOTS} slots of 32 "
        f"bytes: {RING_BYTES} bytes with the flags): {reason}; use fewer or smaller slots\n"
    )  # no traceback, no BufferError, no "leaked shared_memory objects" from the tracker


# -- device path (H200) -----------------------------------------------------------------------


def _needs_example_app() -> None:
    if importlib.util.find_spec("example_app") is None:
        pytest.skip("example_app is not installed (pip install ./example_app)")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dispatcher_args",
    [
        ["--dispatcher=builtin", "--block=64"],
        ["--dispatcher=single_thread_dispatcher", "--grid=1", "--block=1"],
    ],
    ids=["builtin", "single_thread"],
)
def test_device_path_two_process(dispatcher_args: list[str]) -> None:
    _needs_example_app()
    server = start_server(
        "--path=device",
        "--module=example_app._core",
        "--handlers=rpc_increment,echo",
        "--num-slots=8",
        "--slot-size=256",
        *dispatcher_args,
    )
    try:
        assert "path=device" in server.ready_line
        sent = _check_echo_increment(server, 64, seed=3)
        sent += _check_bad_requests(server)
        with server.client() as c:
            tickets = [
                c.submit("rpc_increment", bytes([i % 256]) * 8, request_id=1000 + i)
                for i in range(500)
            ]
            for i, r in enumerate(c.collect(tickets)):
                assert (r.status, r.result) == (0, bytes([(i + 1) % 256]) * 8)
            sent += 500
        processed, counters, _ = server.stop()
        assert processed == sent
        assert counters["answered"] == sent
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.communicate()


# -- issue 42: native host handlers in the test server ---------------------------------------


def _with_module(native_handlers: Path) -> dict[str, str]:
    entries = [str(native_handlers.parent), os.environ.get("PYTHONPATH")]
    path = os.pathsep.join(e for e in entries if e)
    return dict(os.environ, PYTHONPATH=path)


def test_host_path_serves_the_native_handlers_of_a_module(
    native_handlers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", _with_module(native_handlers)["PYTHONPATH"])
    server = start_server(
        "--path=host", "--module=cudaq_test_handlers", "--handlers=rpc_increment,echo",
        "--num-slots=8", "--slot-size=256", "--idle-sleep=0.001",
    )  # fmt: skip
    try:
        sent = _check_echo_increment(server, 64, seed=11)
        sent += _check_bad_requests(server)
        with server.client() as c:
            assert c.call("status_of_first", b"\x03")[0] == STATUS_UNKNOWN_FUNCTION  # not served
        processed, counters, _ = server.stop()
        assert processed == sent + 1
        assert counters["forwarded"] == counters["answered"] == sent + 1
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.communicate()


def test_host_path_serves_every_native_handler_by_default(
    native_handlers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", _with_module(native_handlers)["PYTHONPATH"])
    server = start_server("--path=host", "--module=cudaq_test_handlers", "--timeout=60")
    try:
        with server.client() as c:
            assert c.call("status_of_first", b"\x03") == (3, b"")
            assert c.call("holds_gil") == (0, b"")  # served without the GIL
            assert c.call("rpc_increment", b"\x01") == (0, b"\x02")
        assert server.stop()[0] == 3
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.communicate()


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["--module=cudaq_test_handlers", "--handlers=rpc_increment,nope"], 1,
         "no native host handler 'nope' exported by .*cudaq_test_handlers.*; exported host "
         "handlers: echo, holds_gil, rpc_increment, status_of_first, too_long"),
        (["--module=no_such_module_anywhere"], 2,
         "--module=no_such_module_anywhere: cannot import it"),
        (["--module=json"], 1, r"json/__init__\.py: not an ELF file"),
        (["--module=cudaq_test_handlers", "--handlers=,"], 2,
         "--handlers needs at least one handler name"),
        (["--handlers=nope"], 2, "or name a --module with native host handlers"),
        (["--idle-sleep=0"], 2, "expected a positive number of seconds"),
    ],
)  # fmt: skip
def test_refused_native_handlers_and_bad_modules_are_one_line(
    native_handlers: Path, args: list[str], status: int, message: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq.cli.server", "--path=host", *args],
        capture_output=True, text=True, timeout=60, check=False, env=_with_module(native_handlers),
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (status, ""), proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(message, lines[0]), proc.stderr


# -- issue 40: shared-memory rings attached only as created, never outliving their server ----

SHM = Path("/dev/shm")
HOST_RING = ["--path=host", "--transport=host-ring", "--num-slots=4", "--slot-size=64"]
HOST_RING_READY = re.compile(
    r"CUDAQ_REALTIME_SERVER_READY transport=host-ring shm=(\S+) path=host .*slots=4 slot_size=64$"
)


def _start_ring_server(*extra: str, new_group: bool = False) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "skbuild_cudaq.cli.server", *HOST_RING, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_group,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = HOST_RING_READY.match(line.strip())
    if not m:
        proc.kill()
        pytest.fail(f"no READY line: {line!r} {proc.communicate()}")
    return proc, m[1]


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return out, err


def test_a_segment_truncated_under_the_server_stops_it_in_one_line_naming_it() -> None:
    """A process of the same user shrinking the segment (``ftruncate``) made the serving
    thread's next read of the ring a SIGBUS that killed the server without a word (issue 56
    item 8). It now ends in one line naming the segment, exit status 1."""
    proc, name = _start_ring_server()
    try:
        os.truncate(SHM / name, 0)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        with contextlib.suppress(FileNotFoundError):  # the server could not remove it
            (SHM / name).unlink()
    assert proc.returncode == 1, (proc.returncode, err)
    assert err.strip().splitlines() == [
        f"skbuild-cudaq: the shared ring segment /dev/shm/{name} was truncated by another "
        "process while in use (SIGBUS): stopping"
    ], err


def test_connect_host_ring_attaches_only_what_a_server_created(tmp_path: Path) -> None:
    from skbuild_cudaq.realtime import RingError, connect_host_ring

    total = RingLayout(4, 64).total_bytes
    target = tmp_path / "victim"
    target.write_bytes(bytes(total))
    name = f"cudaq-rt-ring-{os.getpid()}-"  # our own pid: no server start sweeps these
    planted: list[Path] = []

    def plant(token: str) -> tuple[str, Path]:
        path = SHM / f"{name}{token}"
        planted.append(path)
        return path.name, path

    try:
        with pytest.raises(RingError, match="is not the name of a shared-memory ring"):
            connect_host_ring("../../" + str(target).lstrip("/"), 4, 64)
        with pytest.raises(RingError, match="is not the name"):
            connect_host_ring("psm_0123abcd", 4, 64)
        missing, _ = plant("0" * 16)
        with pytest.raises(RingError, match=r"no shared-memory ring .*: is its server still"):
            connect_host_ring(missing, 4, 64)
        link, path = plant("1" * 16)
        path.symlink_to(target)
        with pytest.raises(RingError, match="is a symbolic link"):
            connect_host_ring(link, 4, 64)
        assert target.read_bytes() == bytes(total)  # never mapped, never reset
        open_to_all, path = plant("2" * 16)
        path.write_bytes(bytes(total))
        path.chmod(0o666)
        with pytest.raises(RingError, match="has mode 0666, not 0600"):
            connect_host_ring(open_to_all, 4, 64)
        short, path = plant("3" * 16)
        path.write_bytes(bytes(100))
        path.chmod(0o600)
        with pytest.raises(RingError, match=rf"has 100 bytes, but a ring of 4 slots .* {total}"):
            connect_host_ring(short, 4, 64)
        fifo, path = plant("4" * 16)
        os.mkfifo(path, 0o600)
        with pytest.raises(RingError, match="is not a regular file"):
            connect_host_ring(fifo, 4, 64)
        if os.geteuid() == 0:
            foreign, path = plant("5" * 16)
            path.write_bytes(bytes(total))
            path.chmod(0o600)
            os.chown(path, 65534, 65534)
            with pytest.raises(RingError, match="is owned by uid 65534, not by you"):
                connect_host_ring(foreign, 4, 64)
    finally:
        for path in planted:
            path.unlink(missing_ok=True)


def test_a_server_killed_with_its_process_group_leaves_no_segment_for_good() -> None:
    """SIGKILL of the whole group (an OOM kill, a container stop) runs no clean-up and kills
    Python's resource tracker too: the next server start removes what the dead left."""
    groups = [_start_ring_server(new_group=True) for _ in range(5)]
    alone, alone_name = _start_ring_server()
    killed = [name for _, name in groups] + [alone_name]
    assert all((SHM / name).is_file() for name in killed)
    for proc, _ in groups:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    alone.send_signal(signal.SIGKILL)  # the pid alone: no resource-tracker warning either
    _, err = alone.communicate(timeout=30)
    assert err == ""
    assert all((SHM / name).exists() for name in killed)  # until the next start ...
    live, live_name = _start_ring_server()
    try:
        assert not any((SHM / name).exists() for name in killed)  # ... which removed them
        second, second_name = _start_ring_server()  # a live server's segment is never swept
        assert (SHM / live_name).is_file() and (SHM / second_name).is_file()
        from skbuild_cudaq.realtime import connect_host_ring

        client = connect_host_ring(live_name, 4, 64)
        assert client.call("echo", b"still served", timeout=10) == (0, b"still served")
        client.close()
        _stop(second)
        assert not (SHM / second_name).exists()
    finally:
        _stop(live)
    assert not (SHM / live_name).exists()


def test_sighup_resets_the_shared_ring_a_writer_left_unusable() -> None:
    import mmap

    from skbuild_cudaq.realtime import RingError, connect_host_ring

    proc, name = _start_ring_server()
    try:
        layout = RingLayout(4, 64)
        client = connect_host_ring(name, 4, 64)
        assert client.call("echo", b"one", timeout=10) == (0, b"one")
        client.close()
        with (SHM / name).open("r+b") as f, mmap.mmap(f.fileno(), layout.total_bytes) as m:
            m[layout.rx_flags_offset : layout.rx_flags_offset + 8] = struct.pack("<II", 5, 9)
        with pytest.raises(RingError, match="not in ring order"):
            connect_host_ring(name, 4, 64)
        proc.send_signal(signal.SIGHUP)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == f"CUDAQ_REALTIME_SERVER_RESET transport=host-ring shm={name}"
        client = connect_host_ring(name, 4, 64)
        for i in range(6):
            assert client.call("rpc_increment", bytes([i]), timeout=10) == (0, bytes([i + 1]))
        client.close()
        out, _ = _stop(proc)
        assert out.splitlines()[-1] == "CUDAQ_REALTIME_SERVER_PROCESSED count=6"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_binding_beyond_loopback_warns_once() -> None:
    server = start_server("--path=host", "--host=", "--timeout=1")
    with UdpClient("127.0.0.1", server.port, timeout=10) as c:
        assert c.call("echo", b"x") == (0, b"x")
    _, err = server.proc.communicate(timeout=30)
    assert server.proc.returncode == 0, err
    assert "host=0.0.0.0 " in server.ready_line
    assert err == (
        "skbuild-cudaq: warning: the UDP feeder listens on 0.0.0.0, beyond loopback: anyone "
        "who can reach this port can call its handlers (the wire format has no "
        "authentication)\n"
    )


def test_ipv6_loopback() -> None:
    import socket

    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    server = start_server("--path=host", "--host=::1")
    assert "host=::1 " in server.ready_line
    with server.client() as c:
        assert c.call("rpc_increment", b"\x05") == (0, b"\x06")
    processed, counters, err = server.stop()
    assert processed == 1 and counters["answered"] == 1 and err == ""
