"""Integration (issue 42): a package of native host handlers built with pip, no CUDA
(``tests/packages/host_handlers``), served in process and over UDP beside a Python handler
in one function table, 20,000 checked calls each; the test server serves it by name.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from conftest import PACKAGES
from test_integration_build import build_wheel, install

from skbuild_cudaq.realtime import (
    HostDispatcher,
    InvalidArgumentError,
    RingLayout,
    get_host_handler,
)
from skbuild_cudaq.realtime.host.handlers import exported_host_handlers
from skbuild_cudaq.realtime.host.udp import UdpClient, UdpFeeder

pytestmark = pytest.mark.integration

CALLS = 20_000
NATIVE = ["checksum", "echo", "rpc_increment"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The package built with pip (its own CMake project: find_package(skbuild_cudaq),
    hidden visibility, --gc-sections, Release, stripped at install) and installed."""
    work = tmp_path_factory.mktemp("native handlers") / "with space"
    src = work / "src"
    shutil.copytree(PACKAGES / "host_handlers", src)
    wheel, _log = build_wheel(src, work / "dist", work / "build")
    target = work / "site"
    install(wheel, target)
    sys.path.insert(0, str(target))
    try:
        yield target
    finally:
        sys.path.remove(str(target))


@pytest.fixture(scope="module")
def package(site: Path) -> ModuleType:
    import host_handlers  # type: ignore[import-not-found]

    assert Path(host_handlers.__file__).is_relative_to(site)
    return host_handlers  # type: ignore[no-any-return]


def _expected(name: str, args: bytes) -> tuple[int, bytes]:
    if name == "rpc_increment":
        return 0, bytes((b + 1) % 256 for b in args)
    if name == "echo":
        return 0, args
    if name == "checksum":
        return (2, b"") if not args else (0, (sum(args) & 0xFFFFFFFF).to_bytes(4, "little"))
    return 0, args[::-1]  # reverse, the Python handler


def _requests(seed: int, count: int, max_payload: int) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    names = [*NATIVE, "reverse"]
    return [
        (names[i % len(names)], rng.randbytes(rng.choice([0, rng.randint(0, max_payload)])))
        for i in range(count)
    ]


def test_the_stripped_module_exports_its_handlers(package: ModuleType) -> None:
    from skbuild_cudaq._elf import elf_symbols

    module = Path(package._handlers.__file__)
    with module.open("rb") as f:
        assert elf_symbols(f, module) == []  # stripped: no static symbol table left
    assert exported_host_handlers(package._handlers) == NATIVE


def test_20000_checked_calls_in_process_beside_a_python_handler(package: ModuleType) -> None:
    layout = RingLayout(64, 256)
    with HostDispatcher(layout, package.table()) as dispatcher:
        client = dispatcher.client()
        for i, (name, args) in enumerate(_requests(1, CALLS, layout.max_payload)):
            assert client.call(name, args) == _expected(name, args), (i, name, args)
        assert dispatcher.processed == CALLS
        assert dispatcher.handler_errors == dispatcher.rejected == 0
    assert sorted(dispatcher.handler_names) == sorted([*NATIVE, "reverse"])


def test_20000_checked_calls_over_udp_beside_a_python_handler(package: ModuleType) -> None:
    layout = RingLayout(64, 256)
    requests = _requests(2, CALLS, layout.max_payload)
    with (
        HostDispatcher(layout, package.table()) as dispatcher,
        UdpFeeder(dispatcher.client()) as feeder,
        UdpClient(*feeder.address, timeout=60) as client,
    ):
        for start in range(0, CALLS, layout.num_slots):  # a ring's worth in flight
            window = requests[start : start + layout.num_slots]
            responses = client.collect(client.submit_many(window))
            for (name, args), response in zip(window, responses, strict=True):
                assert (response.status, response.result) == _expected(name, args), name
        counters = feeder.counters
        assert counters["received"] == counters["forwarded"] == counters["answered"] == CALLS
        assert dispatcher.processed == CALLS


def test_the_test_server_serves_the_package_by_name(site: Path) -> None:
    entries = [str(site), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(e for e in entries if e))
    proc = subprocess.Popen(
        [sys.executable, "-m", "skbuild_cudaq.cli.server", "--path=host",
         "--module=host_handlers._handlers", "--handlers=rpc_increment,echo,checksum",
         "--num-slots=64"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        m = re.search(r"host=(\S+) port=(\d+) path=host", proc.stdout.readline())
        assert m, proc.stderr
        requests = [(n, a) for n, a in _requests(3, CALLS + CALLS // 3, 232) if n != "reverse"]
        with UdpClient(m[1], int(m[2]), timeout=60) as client:
            for start in range(0, len(requests), 64):
                window = requests[start : start + 64]
                for (name, args), r in zip(
                    window, client.collect(client.submit_many(window)), strict=True
                ):
                    assert (r.status, r.result) == _expected(name, args), name
            assert client.call("reverse", b"ab")[0] == -2  # a Python handler: not in --handlers
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.splitlines()[-1] == f"CUDAQ_REALTIME_SERVER_PROCESSED count={len(requests) + 1}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_refused_names_and_bad_modules_give_typed_errors(package: ModuleType) -> None:
    with pytest.raises(InvalidArgumentError, match="exported host handlers: checksum, echo, "
                       "rpc_increment") as error:  # fmt: skip
        get_host_handler(package._handlers, "reverse")
    assert error.value.available == tuple(NATIVE)
    with pytest.raises(InvalidArgumentError, match="is a Python function of the module"):
        get_host_handler(package._handlers, "handler_names")
    with pytest.raises(InvalidArgumentError, match=r"__init__\.py: not an ELF file"):
        get_host_handler(package, "echo")  # the Python package, not its extension
