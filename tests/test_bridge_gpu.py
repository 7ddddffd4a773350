"""A bridge of one's own on a real GPU: the mailbox bridge serves the dispatcher end to end.

The device half (tests/gpu_kernels/mailbox_bridge.cu) is linked instead of the
host-ring hooks; the host half (tests/gpu_kernels/mailbox.py) is written only
against the public API. Both the test binary's single-thread kernel and the
built-in kernel serve it; every response byte is checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from gpu_kernels.mailbox import MailboxBridge
from gpu_kernels.testbins import DeviceBinaries

import skbuild_cudaq.realtime as rt
from skbuild_cudaq.realtime import wire
from skbuild_cudaq.realtime.library import Kernel

pytestmark = pytest.mark.gpu

N = 2000


@pytest.fixture
def fresh() -> Iterator[None]:
    rt.release_library()
    yield
    rt.release_library()


def _single_thread(kernel: Kernel) -> Callable[[rt.LaunchArgs], None]:
    def launch(args: rt.LaunchArgs) -> None:
        cfg = rt.LaunchConfig(grid=1, block=1)
        rt.launch_kernel(kernel, cfg, args.stream, *args.kernel_args())

    return launch


@pytest.mark.parametrize("kind", ["single_thread", "builtin"])
def test_mailbox_bridge_serves_the_dispatcher(bins: DeviceBinaries, fresh: None, kind: str) -> None:
    bridge = MailboxBridge(bins.mailbox_bridge, slot_size=128)
    library = rt.get_library(bins.app, bridge=bridge.device_code)  # before any lookup
    assert library.bridge == (bins.mailbox_bridge.resolve(),)
    config = rt.DispatcherConfig(num_slots=1, slot_size=128)
    with rt.Dispatcher(config, bridge=bridge, module=str(bins.app)) as dispatcher:
        for name in ("echo", "rpc_increment"):
            dispatcher.function_table.add_device(name, rt.get_device_handler(bins.app, name))
        if kind == "single_thread":
            kernel = rt.get_device_kernel(bins.app, "single_thread_dispatcher")
            dispatcher.set_unified_launch(_single_thread(kernel))
        dispatcher.start()
        assert dispatcher.launch_args is not None
        assert dispatcher.launch_args.transport_ctx == bridge.transport_ctx != 0
        for k in range(N):
            payload = bytes((k + i) % 256 for i in range(k % 97))
            name = "echo" if k % 2 else "rpc_increment"
            response = bridge.call(name, payload)
            expected = payload if name == "echo" else bytes((b + 1) % 256 for b in payload)
            assert response.ok, (k, response.status)
            assert response.request_id == k
            assert response.header.ptp_timestamp == 0x5EED0000 + k
            assert response.result == expected, k
        unknown = bridge.call("no_such_handler", b"x")
        assert unknown.status == wire.STATUS_UNKNOWN_FUNCTION
        assert dispatcher.stop() == N + 1
    assert bridge.transport_ctx != 0  # a bridge the dispatcher did not create stays open
    bridge.close()


def test_a_bridge_needs_its_device_code_linked(bins: DeviceBinaries, fresh: None) -> None:
    rt.get_library(bins.app)  # linked with the host-ring hooks first
    bridge = MailboxBridge(bins.mailbox_bridge, slot_size=128)
    config = rt.DispatcherConfig(num_slots=1, slot_size=128)
    with rt.Dispatcher(config, bridge=bridge, module=str(bins.app)) as dispatcher:
        dispatcher.function_table.add_device("echo", rt.get_device_handler(bins.app, "echo"))
        with pytest.raises(rt.LibraryConflictError, match="linked with the host-ring hooks"):
            dispatcher.start()
        assert not dispatcher.running
    bridge.close()
