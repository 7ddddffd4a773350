"""Run example_app's dispatchers: ``python -m example_app [--device N | --devices all]``.

One dispatcher per GPU chosen, each with its own host ring, all in this process;
every GPU answers ``--calls`` ``rpc_increment`` calls, checked byte by byte, then
the dispatchers stop and report their counts::

    python -m example_app                          # GPU 0, single-thread kernel
    python -m example_app --device 1 --dispatcher warp_parallel
    python -m example_app --devices all            # every GPU at once
"""

from __future__ import annotations

import argparse
import threading
import time
from contextlib import ExitStack
from typing import Any

from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig, get_device_handler

from . import _core, launchers


def _serve(dispatcher: Any, calls: int, results: dict[int, Any]) -> None:
    device = dispatcher.config.device
    try:
        client = dispatcher.bridge.client()
        started = time.perf_counter()
        for i in range(calls):
            payload = bytes((i + j) % 256 for j in range(16))
            status, result = client.call("rpc_increment", payload)
            if status != 0 or bytes(result) != bytes((b + 1) % 256 for b in payload):
                msg = f"device {device}: call {i} answered status {status}, {bytes(result)!r}"
                raise RuntimeError(msg)
        results[device] = time.perf_counter() - started
    except Exception as exc:  # reported by main
        results[device] = exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m example_app", description=__doc__)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--device", type=int, default=0, help="the GPU to serve (default 0)")
    where.add_argument("--devices", help="'all' or N,M,...: one dispatcher per GPU")
    kinds = sorted(launchers.LAUNCHERS)
    parser.add_argument("--dispatcher", choices=kinds, default="single_thread")
    parser.add_argument("--calls", type=int, default=10_000)
    opts = parser.parse_args(argv)

    if opts.devices is None:
        devices = [opts.device]
    elif opts.devices == "all":
        from cuda.bindings import driver

        driver.cuInit(0)
        devices = list(range(int(driver.cuDeviceGetCount()[1])))
    else:
        devices = [int(d) for d in opts.devices.split(",")]
    results: dict[int, Any] = {}
    with ExitStack() as stack:
        dispatchers = []
        for device in devices:
            d = stack.enter_context(
                Dispatcher(DispatcherConfig(device=device, num_slots=64), module=_core)
            )
            for name in ("rpc_increment", "echo"):
                # handler addresses are per GPU: look them up for this one
                d.function_table.add_device(name, get_device_handler(_core, name, device=device))
            d.set_unified_launch(launchers.LAUNCHERS[opts.dispatcher](_core, device=device))
            d.start()
            dispatchers.append(d)
        threads = [
            threading.Thread(target=_serve, args=(d, opts.calls, results)) for d in dispatchers
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for d in dispatchers:
            outcome = results.get(d.config.device)
            count = d.stop()
            if isinstance(outcome, BaseException) or outcome is None:
                print(f"device {d.config.device}: FAILED: {outcome}")
                return 1
            print(
                f"device {d.config.device}: {count} requests answered, "
                f"{outcome / opts.calls * 1e6:.2f} us per call ({opts.dispatcher})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
