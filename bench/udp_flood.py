"""A correct UDP client under a flood: bench/results/udp_flood.json (CPU only, loopback).

    python bench/udp_flood.py [--out bench/results/udp_flood.json] [--seconds 10]

The test server serves ``rpc_increment`` on the host path (a ring of 8 slots); one local
process floods its port with valid requests from 10 sockets, as fast as it can, for at most
``--seconds`` and ``--flood-max`` datagrams, never reading an answer. While it floods, one
correct client (:class:`UdpClient`, one request at a time, ``--timeout`` each) makes up to
``--calls`` calls (those made before the flood ends count). The result: the fraction of the
correct client's calls answered (correctly), and the
feeder's counters from the server's exit line (``received``, ``forwarded``, ``shed`` and the
rest), the flood's datagrams sent, the time. The server drains its socket in batches and,
with the ring full, serves the sources in turn and sheds the newest requests of the source
holding the most (backlog.c of the native core), so the correct client waits one turn.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # bench/ is not a package

FLOOD = r"""
import socket, struct, sys, time
port, seconds, limit, fid = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(10)]
for s in socks:
    s.setblocking(False)
head = struct.Struct("<IIIIQ")
sent, end, i = 0, time.monotonic() + seconds, 0
while sent < limit and (sent & 1023 or time.monotonic() < end):
    s = socks[i % 10]; i += 1
    try:
        s.sendto(head.pack(0x43555152, fid, 8, i & 0xFFFFFFFF, 0) + bytes(8), ("127.0.0.1", port))
        sent += 1
    except BlockingIOError:
        pass
print(sent)
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=c.RESULTS / "udp_flood.json")
    p.add_argument("--seconds", type=float, default=10.0, help="the flood's length at most")
    p.add_argument("--flood-max", type=int, default=5_000_000, help="the flood's datagrams at most")
    p.add_argument("--calls", type=int, default=500, help="the correct client's calls at most")
    p.add_argument("--timeout", type=float, default=1.0, help="seconds a call may wait")
    a = p.parse_args(argv)
    from skbuild_cudaq.realtime.host.udp import UdpClient
    from skbuild_cudaq.realtime.wire import function_id

    fid = function_id("rpc_increment")
    with tempfile.TemporaryDirectory() as work:  # not the checkout's root: see bench/wire.py
        server = subprocess.Popen(
            [sys.executable, "-m", "skbuild_cudaq.cli.server", "--path=host",
             "--handlers=rpc_increment", "--num-slots=8", "--slot-size=256",
             f"--timeout={a.seconds * 3 + 30:g}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=work,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            ready = server.stdout.readline()
            port = int(re.search(r"port=(\d+)", ready)[1])  # type: ignore[index]
            flood = subprocess.Popen(
                [sys.executable, "-c", FLOOD, str(port), str(a.seconds), str(a.flood_max),
                 str(fid)], stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            time.sleep(0.5)  # the flood under way
            answered, made, start = 0, 0, time.monotonic()
            with UdpClient("127.0.0.1", port, timeout=a.timeout) as client:
                while made < a.calls and flood.poll() is None:
                    i, made = made, made + 1
                    args = struct.pack("<Q", i)
                    try:
                        status, result = client.call("rpc_increment", args)
                    except TimeoutError:
                        continue
                    answered += status == 0 and result == bytes((b + 1) % 256 for b in args)
            elapsed = time.monotonic() - start
            sent = int(flood.communicate(timeout=a.seconds + 60)[0].strip() or 0)
            server.send_signal(signal.SIGTERM)
            out, err = server.communicate(timeout=60)
        finally:
            for proc in (server, locals().get("flood")):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    bridge = next((ln for ln in out.splitlines() if "BRIDGE" in ln), "")
    counters = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", bridge)}
    if server.returncode != 0 or not counters:
        raise SystemExit(f"test server: exit {server.returncode}:\n{out}{err}")
    doc: dict[str, Any] = c.header("udp_flood")
    doc["setup"] = {
        "ring": "8 x 256 bytes, host path, Python handler rpc_increment",
        "flood": {"sockets": 10, "process": 1, "sent": sent, "max": a.flood_max},
        "client": {"calls": made, "timeout_s": a.timeout, "seconds": round(elapsed, 2)},
        "cpus": os.cpu_count(),
        "loopback": socket.gethostbyname("localhost"),
    }
    if made == 0:
        raise SystemExit("the flood ended before the correct client's first call")
    doc["answered_fraction"] = answered / made
    doc["answered"] = answered
    doc["server"] = counters
    c.write_json(a.out, doc)
    print(f"correct client: {answered} of {made} answered; server: {bridge.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
