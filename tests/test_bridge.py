"""A bridge of one's own: linking its device half, the Bridge protocol, conflicts (no GPU)."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _fake_driver import OK, UseDriver, startup_driver
from gpu_kernels.mailbox import MailboxBridge
from gpu_kernels.testbins import DeviceBinaries

import skbuild_cudaq.realtime as rt
from skbuild_cudaq.realtime.errors import DeviceCodeError, LibraryConflictError, LinkError
from skbuild_cudaq.realtime.library import cubin_symbols
from skbuild_cudaq.realtime.link.cache import LinkCache, cache_key
from skbuild_cudaq.realtime.link.device_runtime import HOST_RING_HOOKS, runtime_device_code
from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code, prepare_link

NO_CACHE = LinkCache(None)
MAILBOX_MAGIC = struct.pack("<I", 0x584F424D)  # an immediate in the mailbox hooks' code
RING_MAGIC = struct.pack("<I", 0x474E4952)  # the host-ring hooks' context check


def _protocol_members() -> set[str]:
    return {
        name
        for name in vars(rt.Bridge)
        if not name.startswith("_") and name not in {"register", "copy_with"}
    }


def test_host_ring_bridge_and_a_third_party_bridge_have_every_protocol_member(
    tmp_path: Path,
) -> None:
    import inspect

    members = _protocol_members()
    assert members == {
        "num_slots",
        "slot_size",
        "device_code",
        "transport_ctx",
        "open",
        "reset",
        "close",
    }
    bridges = (rt.HostRingBridge(4, 64), MailboxBridge(tmp_path / "mailbox.fatbin"))
    for bridge in bridges:  # looked up statically: nothing is opened or allocated
        missing = {m for m in members if not _has(inspect, bridge, m)}
        assert not missing, (type(bridge).__name__, missing)
    assert rt.HostRingBridge.device_code is None  # the built-in hooks


def _has(inspect: Any, obj: object, name: str) -> bool:
    try:
        inspect.getattr_static(obj, name)
    except AttributeError:
        return False
    return True


@pytest.mark.toolchain
def test_runtime_with_a_bridge_replaces_the_host_ring_hooks(bins: DeviceBinaries) -> None:
    default = {i.name.split(":")[0] for i in runtime_device_code().inputs}
    assert HOST_RING_HOOKS in default
    own = {i.name.split(":")[0] for i in runtime_device_code(bridge=[bins.mailbox_bridge]).inputs}
    assert own == (default - {HOST_RING_HOOKS}) | {bins.mailbox_bridge.name}


@pytest.mark.toolchain
def test_link_with_a_bridge_of_ones_own(bins: DeviceBinaries) -> None:
    ring = link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=NO_CACHE).cubin
    mailbox = link_device_code(
        bins.app, LinkOptions(arch="sm_90", bridge=(bins.mailbox_bridge,)), cache=NO_CACHE
    ).cubin
    symbols = cubin_symbols(mailbox)
    assert {"cudaq_realtime_unified_dispatch", "single_thread_dispatcher"} <= set(symbols.kernels)
    assert symbols.handlers == ("echo", "rpc_increment")
    assert not [u for u in symbols.undefined if not u.startswith(".nv.")]
    # the hooks are inlined: their code is the mailbox's, not the host ring's
    assert MAILBOX_MAGIC in mailbox and RING_MAGIC not in mailbox
    assert RING_MAGIC in ring and MAILBOX_MAGIC not in ring


@pytest.mark.toolchain
def test_the_bridge_is_part_of_the_cache_key(bins: DeviceBinaries, tmp_path: Path) -> None:
    cache = LinkCache(tmp_path / "cache")
    ring = prepare_link(bins.app, LinkOptions(arch="sm_90"), cache)
    mailbox = prepare_link(
        bins.app, LinkOptions(arch="sm_90", bridge=(bins.mailbox_bridge,)), cache
    )
    assert ring.digest != mailbox.digest
    assert mailbox.finish("sm_90").cache_hit is False
    assert mailbox.finish("sm_90").cache_hit is True
    assert ring.finish("sm_90").cache_hit is False  # not served the mailbox's cubin
    assert cache_key([b"x"], ["-lto"], "sm_90", "id") != mailbox.digest


@pytest.mark.toolchain
def test_a_bridge_without_the_hooks_is_a_link_error(bins: DeviceBinaries) -> None:
    with pytest.raises(LinkError) as info:
        link_device_code(
            bins.app, LinkOptions(arch="sm_90", bridge=(bins.not_a_bridge,)), cache=NO_CACHE
        )
    assert "Unresolved extern function 'cudaq_dev_" in info.value.log
    assert "with the bridge" in str(info.value)


def test_a_missing_bridge_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.fatbin"
    with pytest.raises(DeviceCodeError, match=r"the bridge's device code .*nowhere\.fatbin"):
        runtime_device_code(bridge=[missing])
    with pytest.raises(DeviceCodeError, match="at least one fatbin"):
        runtime_device_code(bridge=[])


@pytest.mark.toolchain
def test_cli_link_with_a_bridge(bins: DeviceBinaries, tmp_path: Path) -> None:
    out = tmp_path / "mailbox.cubin"
    cmd = [sys.executable, "-m", "skbuild_cudaq", "link", str(bins.app), "--arch", "sm_90"]
    proc = subprocess.run(
        [*cmd, "--bridge", str(bins.mailbox_bridge), "--no-cache", "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        out.read_bytes()
        == link_device_code(
            bins.app, LinkOptions(arch="sm_90", bridge=(bins.mailbox_bridge,)), cache=NO_CACHE
        ).cubin
    )
    proc = subprocess.run(
        [*cmd, "--bridge", str(tmp_path / "none.fatbin"), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "none.fatbin does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- the registry: one binary, one bridge (fake driver: error paths only) ---------------------


@pytest.fixture
def fake_gpu(
    monkeypatch: pytest.MonkeyPatch, use_driver: UseDriver, tmp_path: Path
) -> Iterator[None]:
    """A fake driver (loads succeed), a private link cache, an empty registry."""
    use_driver(startup_driver([], retain=lambda dev: (OK, "ctx")))
    monkeypatch.setenv("SKBUILD_CUDAQ_LINK_CACHE", str(tmp_path / "cache"))
    rt.release_library()
    yield
    rt.release_library()


@pytest.mark.toolchain
def test_one_binary_is_linked_with_one_bridge(bins: DeviceBinaries, fake_gpu: None) -> None:
    lib = rt.get_library(bins.app, bridge=[bins.mailbox_bridge])
    assert lib.bridge == (bins.mailbox_bridge.resolve(),)
    assert MAILBOX_MAGIC in lib.cubin
    assert rt.get_library(bins.app) is lib  # no bridge named: whatever is linked
    assert rt.get_library(bins.app, bridge=bins.mailbox_bridge) is lib
    with pytest.raises(LibraryConflictError, match="already linked with the bridge"):
        rt.get_library(bins.app, bridge=[bins.not_a_bridge])
    rt.release_library()
    lib = rt.get_library(bins.app)  # the host-ring hooks
    assert lib.bridge is None
    with pytest.raises(
        LibraryConflictError, match=r"already linked with the host-ring hooks.*release_library"
    ):
        rt.get_library(bins.app, bridge=[bins.mailbox_bridge])


@pytest.mark.toolchain
def test_dispatcher_refuses_a_library_linked_without_its_bridge(
    bins: DeviceBinaries, fake_gpu: None
) -> None:
    rt.get_library(bins.app)  # e.g. a handler looked up before the bridge was known
    bridge = MailboxBridge(bins.mailbox_bridge)
    config = rt.DispatcherConfig(num_slots=1, slot_size=128)
    dispatcher = rt.Dispatcher(config, bridge=bridge, module=str(bins.app))
    with pytest.raises(LibraryConflictError, match="already linked with the host-ring hooks"):
        dispatcher._resolve_library()
    # a launcher's kernel from a library linked without the bridge is refused too
    kernel: Any = SimpleNamespace(library=rt.get_library(bins.app))
    launcher: Any = SimpleNamespace(kernel=kernel)
    dispatcher.module = None
    dispatcher._launcher = launcher
    with pytest.raises(LibraryConflictError, match="linked without this bridge's device code"):
        dispatcher._resolve_library()


_TYPED_USE = """
from pathlib import Path

from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig, HostRingBridge


class MailBridge:
    num_slots = 1
    slot_size = 128
    device_code: tuple[Path, ...] | None = (Path("mailbox.fatbin"),)
    transport_ctx = 0

    def open(self) -> "MailBridge":
        return self

    def reset(self) -> None: ...

    def close(self) -> None: ...

    def post(self) -> int:
        return 1


ring: HostRingBridge = Dispatcher(DispatcherConfig()).bridge
ring.client()
config = DispatcherConfig(num_slots=1, slot_size=128)
own: MailBridge = Dispatcher(config, bridge=MailBridge()).bridge
own.post()
with Dispatcher() as d:
    d.bridge.client()
"""


def test_dispatcher_bridge_keeps_its_type(tmp_path: Path) -> None:
    """A type checker sees ``dispatcher.bridge`` as the bridge given (HostRingBridge by default)."""
    pytest.importorskip("mypy", reason="mypy comes with the lint extra")

    def mypy(name: str, text: str) -> subprocess.CompletedProcess[str]:
        source = tmp_path / name
        source.write_text(text, encoding="utf-8")
        cmd = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(source)]
        return subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp_path)

    proc = mypy("typed_use.py", _TYPED_USE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = mypy("bad_use.py", _TYPED_USE.replace("own.post()", "own.client()"))
    assert proc.returncode == 1
    assert '"MailBridge" has no attribute "client"' in proc.stdout
    # a round trip's result is typed as what it is, not as a union with Any
    proc = mypy("revealed.py", _TYPED_USE + 'reveal_type(ring.client().call("echo", b"x"))\n')
    assert 'Revealed type is "tuple[int, bytes]"' in proc.stdout, proc.stdout
