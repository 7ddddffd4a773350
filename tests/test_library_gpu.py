"""Load, look up and launch on a real GPU (marker gpu; skipped where there is none)."""

from __future__ import annotations

import ctypes
import types
from collections.abc import Iterator
from typing import Any

import pytest
from gpu_kernels.testbins import DeviceBinaries

import skbuild_cudaq.realtime as rt
from skbuild_cudaq.realtime.library import Library
from skbuild_cudaq.realtime.link.cache import LinkCache

pytestmark = pytest.mark.gpu


@pytest.fixture
def app(bins: DeviceBinaries) -> Iterator[types.ModuleType]:
    module = types.ModuleType("fake_app_core")
    module.__file__ = str(bins.app)
    rt.release_library()
    yield module
    rt.release_library()


def _drv() -> Any:
    from cuda.bindings import driver

    return driver


def _ok(ret: Any) -> Any:
    from skbuild_cudaq.realtime._driver import check

    return check(ret, "test")


class DeviceBuffer:
    def __init__(self, count: int) -> None:
        self.count = count
        self.ptr = _ok(_drv().cuMemAlloc(4 * count))
        _ok(_drv().cuMemsetD32(self.ptr, 0, count))

    def read(self) -> list[int]:
        host = (ctypes.c_uint32 * self.count)()
        _ok(_drv().cuMemcpyDtoH(ctypes.addressof(host), self.ptr, 4 * self.count))
        return list(host)

    def arg(self) -> ctypes.c_void_p:
        return ctypes.c_void_p(int(self.ptr))

    def free(self) -> None:
        _ok(_drv().cuMemFree(self.ptr))


def test_kernel_and_handler_lookups(app: types.ModuleType) -> None:
    kernel = rt.get_device_kernel(app, "single_thread_dispatcher")
    builtin = rt.get_device_kernel(app, "cudaq_realtime_unified_dispatch")
    assert kernel.library is builtin.library  # one module for the process
    inc = rt.get_device_handler(app, "rpc_increment")
    echo = rt.get_device_handler(app, "echo")
    assert 0 not in (inc, echo)
    assert inc != echo
    lib = kernel.library
    assert lib.contains(inc) and lib.contains(echo)
    assert not lib.contains(inc + 4) and not lib.contains(0)
    assert lib.handler_addresses() == {"echo": echo, "rpc_increment": inc}
    func = kernel.function()
    blocks = _ok(_drv().cuOccupancyMaxActiveBlocksPerMultiprocessor(func, 32, 0))
    assert int(blocks) >= 1


def test_a_source_built_for_newer_gpus_only_is_left_out_and_the_rest_serves(
    bins: DeviceBinaries,
) -> None:
    """A module whose report kernels were built for sm_100 only, on an older GPU: that
    container is left out of the link (as CUDA leaves out a translation unit without code
    for the device), the dispatcher and handlers of the others load and run, and a lookup
    of a left-out kernel says why it is not there."""
    from skbuild_cudaq.realtime.link.linker import LeftOut

    module = types.ModuleType("newer_only")
    module.__file__ = str(bins.newer_only)
    rt.release_library()
    try:
        kernel = rt.get_device_kernel(module, "single_thread_dispatcher")
        library = kernel.library
        if int(library.arch.removeprefix("sm_").rstrip("af")) >= 100:
            pytest.skip(f"{library.arch} links the sm_100 container: nothing is left out")
        assert [(item.has, item.lowest) for item in library.left_out] == [("lto-ir sm_100", 100)]
        assert isinstance(library.left_out[0], LeftOut)
        inc = rt.get_device_handler(module, "rpc_increment")
        assert library.contains(inc)
        blocks = _ok(_drv().cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel.function(), 1, 0))
        assert int(blocks) >= 1
        with pytest.raises(rt.InvalidArgumentError, match="left out of the link for sm_") as info:
            rt.get_device_kernel(module, "cluster_report")
        assert info.value.left_out == library.left_out
        assert "run on a GPU of sm_100 or newer" in str(info.value)
    finally:
        rt.release_library()


def test_missing_names_are_invalid_arguments(app: types.ModuleType) -> None:
    with pytest.raises(rt.InvalidArgumentError, match="single_thread_dispatcher") as info:
        rt.get_device_kernel(app, "not_a_kernel")
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValueError, match=r"exported handlers: echo, rpc_increment"):
        rt.get_device_handler(app, "not_a_handler")


def test_second_binary_is_refused_until_released(
    app: types.ModuleType, bins: DeviceBinaries
) -> None:
    rt.get_device_kernel(app, "single_thread_dispatcher")
    with pytest.raises(rt.LibraryConflictError, match="release_library"):
        rt.get_device_kernel(str(bins.launch_checks), "cluster_report")
    with pytest.raises(rt.LibraryConflictError):
        rt.get_device_handler(str(bins.launch_checks), "echo")
    rt.release_library()
    assert rt.get_device_kernel(str(bins.launch_checks), "cluster_report").name == "cluster_report"


def test_kernel_keeps_library_alive_and_close_is_idempotent(bins: DeviceBinaries) -> None:
    with Library(bins.app, cache=LinkCache(None)) as lib:
        with lib.get_kernel("single_thread_dispatcher") as kernel:
            assert kernel.library is lib
            assert kernel.function() is not None
        kernel.close()
        assert kernel.closed
    lib.close()
    assert lib.closed
    with pytest.raises(rt.RealtimeError, match="closed"):
        lib.get_kernel("single_thread_dispatcher")


@pytest.fixture
def checks(bins: DeviceBinaries) -> Iterator[Library]:
    with Library(bins.launch_checks) as lib:
        yield lib


def test_launch_with_cluster_dimensions(checks: Library) -> None:
    from skbuild_cudaq.realtime._driver import current_arch

    if int(current_arch()[3:].rstrip("af")) < 90:
        pytest.skip("thread-block clusters need sm_90+")
    kernel = checks.get_kernel("cluster_report")
    out = DeviceBuffer(8)
    try:
        rt.launch_kernel(kernel, rt.LaunchConfig(grid=4, block=32, cluster=(2, 1, 1)), 0, out.arg())
        _ok(_drv().cuCtxSynchronize())
        assert out.read() == [0, 2, 1, 2, 0, 2, 1, 2]
        rt.launch_kernel(kernel, rt.LaunchConfig(grid=4, block=32), 0, out.arg())
        _ok(_drv().cuCtxSynchronize())
        assert out.read() == [0, 1] * 4  # without the attribute: clusters of one block
    finally:
        out.free()


def test_launch_cooperative(checks: Library) -> None:
    kernel = checks.get_kernel("grid_sync_report")
    grid = 8
    counter, out, valid = DeviceBuffer(1), DeviceBuffer(grid), DeviceBuffer(grid)
    try:
        config = rt.LaunchConfig(grid=grid, block=64, cooperative=True)
        rt.launch_kernel(kernel, config, 0, counter.arg(), out.arg(), valid.arg())
        _ok(_drv().cuCtxSynchronize())
        assert valid.read() == [1] * grid
        assert out.read() == [grid] * grid  # every block counted in before any read
        assert counter.read() == [grid]
        # (Without the attribute, driver 580 on sm_90 still reports grid.is_valid():
        # the attribute's effect is the co-residency guarantee, checked above by
        # every block passing grid.sync() and seeing the full count.)
    finally:
        for buf in (counter, out, valid):
            buf.free()


def test_launch_rejects_non_ctypes_arguments(checks: Library) -> None:
    kernel = checks.get_kernel("cluster_report")
    with pytest.raises(rt.InvalidArgumentError, match="not a ctypes value"):
        rt.launch_kernel(kernel, rt.LaunchConfig(grid=1, block=1), 0, 1234)
