"""Several GPUs without a GPU: per-device lookups, one link per architecture, start() checks.

A fake driver with two devices (``_fake_driver.FakeDriver``: per-thread context
stacks, handler addresses that differ per context) drives the run time's
per-device logic and its errors; the links are real (nvJitLink, ``toolchain``).
What it proves on real GPUs is in ``tests/test_multigpu_gpu.py``.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _fake_driver import FakeDriver, UseDriver
from gpu_kernels.testbins import DeviceBinaries

import skbuild_cudaq.realtime as rt
from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime.errors import InvalidArgumentError, LibraryConflictError

SAME_ARCH = ((9, 0), (9, 0))
MIXED = ((9, 0), (8, 0))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("link-cache")


@pytest.fixture
def links(monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> Iterator[list[str]]:
    """Architectures the run time links for (every call of the link, cache hits included)."""
    from skbuild_cudaq.realtime.link import linker as link_module

    monkeypatch.setenv("SKBUILD_CUDAQ_LINK_CACHE", str(cache_dir))
    real = link_module.link_device_code
    archs: list[str] = []

    def counted(binary: Any, options: Any = None, *, cache: Any = None) -> Any:
        result = real(binary, options, cache=cache)
        archs.append(result.arch)
        return result

    monkeypatch.setattr(link_module, "link_device_code", counted)
    rt.release_library()
    yield archs
    rt.release_library()


@pytest.fixture
def app(bins: DeviceBinaries) -> types.ModuleType:
    module = types.ModuleType("fake_app_core")
    module.__file__ = str(bins.app)
    return module


# -- _driver helpers (no toolchain) ---------------------------------------------------------------


def test_pushed_restores_the_callers_context(use_driver: UseDriver) -> None:
    fake = use_driver(FakeDriver(SAME_ARCH))
    ctx0, ctx1 = _driver.primary_context(0), _driver.primary_context(1)
    assert _driver.primary_context(1) == ctx1 and fake.retained == {0: 1, 1: 1}  # retained once
    assert fake.current() is None  # retaining makes nothing current
    with _driver.pushed(ctx1):
        assert fake.current() == ctx1
        with _driver.pushed(ctx0):
            assert fake.current() == ctx0
        assert fake.current() == ctx1
        depth = len(fake._stack())
        with _driver.pushed(ctx1):  # already current: nothing pushed
            assert len(fake._stack()) == depth
    assert fake.current() is None


def test_a_bad_ordinal_names_the_visible_devices(use_driver: UseDriver) -> None:
    use_driver(FakeDriver(MIXED))
    assert (_driver.ordinal_arch(0), _driver.ordinal_arch(1)) == ("sm_90", "sm_80")
    assert _driver.device_count() == 2
    for call in (_driver.ordinal_arch, _driver.primary_context):
        with pytest.raises(InvalidArgumentError, match=r"device=2: this process sees 2 CUDA dev"):
            call(2)


def test_current_ordinal_follows_the_current_context(use_driver: UseDriver) -> None:
    use_driver(FakeDriver(SAME_ARCH))
    assert _driver.current_ordinal() == 0  # none current: device 0
    with _driver.pushed(_driver.primary_context(1)):
        assert _driver.current_ordinal() == 1


# -- lookups per device (real links, fake driver) ----------------------------------------------


@pytest.mark.toolchain
def test_lookups_per_device_share_one_link_per_arch(
    use_driver: UseDriver, links: list[str], app: types.ModuleType
) -> None:
    fake = use_driver(FakeDriver(SAME_ARCH))
    echo0 = rt.get_device_handler(app, "echo", device=0)
    echo1 = rt.get_device_handler(app, "echo", device=1)
    inc1 = rt.get_device_handler(app, "rpc_increment", device=1)
    kernel0 = rt.get_device_kernel(app, "single_thread_dispatcher", device=0)
    kernel1 = rt.get_device_kernel(app, "single_thread_dispatcher", device=1)
    assert links == ["sm_90"]  # two GPUs of one architecture: one link, one module
    assert kernel0.library is kernel1.library
    assert list(rt.library.loaded_libraries()) == ["sm_90"]
    assert len(fake.loaded) == 1
    assert echo0 != echo1 and inc1 not in (echo0, echo1)  # addresses are per context
    lib = kernel0.library
    assert lib.contains(echo0, device=0) and not lib.contains(echo0, device=1)
    assert lib.contains(echo1, device=1) and not lib.contains(echo1, device=0)
    assert lib.owners(echo1) == [(1, "echo")]
    assert lib.handler_addresses(device=1) == {"echo": echo1, "rpc_increment": inc1}
    # each device's globals were read in that device's context, and only once
    reads = [ctx for call, ctx in fake.calls if call == "cuLibraryGetGlobal(cudaq_handler_echo)"]
    assert reads == [FakeDriver.CTX_BASE, FakeDriver.CTX_BASE + 1]
    # a function per context, the caller's current context left alone by explicit lookups
    assert kernel1.function(device=1).endswith(f"@{FakeDriver.CTX_BASE + 1:#x}")
    assert kernel0.function(device=0).endswith(f"@{FakeDriver.CTX_BASE:#x}")
    assert fake.current() is None


@pytest.mark.toolchain
def test_two_architectures_link_twice_and_only_twice(
    use_driver: UseDriver,
    links: list[str],
    app: types.ModuleType,
    bins: DeviceBinaries,
) -> None:
    use_driver(FakeDriver(MIXED))
    kernel0 = rt.get_device_kernel(app, "single_thread_dispatcher", device=0)
    kernel1 = rt.get_device_kernel(app, "single_thread_dispatcher", device=1)
    rt.get_device_handler(app, "echo", device=1)
    rt.get_device_handler(app, "echo", device=0)
    assert links == ["sm_90", "sm_80"]
    assert kernel0.library is not kernel1.library
    assert (kernel0.library.arch, kernel1.library.arch) == ("sm_90", "sm_80")
    # a module used directly on a GPU of another architecture is named, not a driver error
    with pytest.raises(InvalidArgumentError, match=r"is linked for sm_90, but device 1 is sm_80"):
        kernel0.library.get_handler("echo", device=1)
    with pytest.raises(InvalidArgumentError, match=r"is linked for sm_80, but device 0 is sm_90"):
        kernel1.function(device=0)
    assert sorted(rt.library.loaded_libraries()) == ["sm_80", "sm_90"]
    # the registry's one-binary rule holds across architectures
    with pytest.raises(LibraryConflictError, match="already linked in this process"):
        rt.get_device_kernel(bins.two_sections, "single_thread_dispatcher", device=1)
    rt.release_library()
    assert rt.library.loaded_libraries() == {}
    assert kernel0.closed and kernel1.closed


@pytest.mark.toolchain
def test_without_device_the_current_context_decides(
    use_driver: UseDriver, links: list[str], app: types.ModuleType
) -> None:
    fake = use_driver(FakeDriver(SAME_ARCH))
    # one GPU's behaviour, unchanged: no context current -> device 0's is made current
    echo = rt.get_device_handler(app, "echo")
    assert fake.current() == FakeDriver.CTX_BASE
    assert echo == rt.get_device_handler(app, "echo", device=0)
    with _driver.pushed(_driver.primary_context(1)):
        assert rt.get_device_handler(app, "echo") == rt.get_device_handler(app, "echo", device=1)
    assert links == ["sm_90"]


@pytest.mark.toolchain
def test_lookups_from_two_threads_link_once(
    use_driver: UseDriver, links: list[str], app: types.ModuleType
) -> None:
    use_driver(FakeDriver(SAME_ARCH))
    found: dict[int, int] = {}
    errors: list[BaseException] = []

    def look_up(device: int) -> None:
        try:
            found[device] = rt.get_device_handler(app, "rpc_increment", device=device)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=look_up, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert links == ["sm_90"]
    assert found[0] != found[1]


# -- the dispatcher's start() checks (refused before anything is allocated) -----------------


def _dispatcher(app: types.ModuleType, device: int) -> Any:
    return rt.Dispatcher(
        rt.DispatcherConfig(device=device, num_slots=32, slot_size=128), module=app
    )


@pytest.mark.toolchain
@pytest.mark.parametrize("archs", [SAME_ARCH, MIXED], ids=["same-arch", "mixed-arch"])
def test_a_handler_of_another_gpu_is_refused_at_start(
    use_driver: UseDriver,
    links: list[str],
    app: types.ModuleType,
    archs: tuple[tuple[int, int], ...],
) -> None:
    fake = use_driver(FakeDriver(archs))
    echo1 = rt.get_device_handler(app, "echo", device=1)
    inc0 = rt.get_device_handler(app, "rpc_increment", device=0)
    d = _dispatcher(app, 0)
    d.function_table.add_device("rpc_increment", inc0)
    d.function_table.add_device("echo", echo1)
    calls = len(fake.calls)
    with pytest.raises(InvalidArgumentError) as info:
        d.start()
    text = str(info.value)
    assert text.startswith("DEVICE_CALL entries looked up on another GPU: 'echo' ")
    assert "(looked up with get_device_handler(..., device=1))" in text
    assert "runs on device 0" in text and "device=0)" in text
    assert "rpc_increment" not in text  # the right entry is not blamed
    assert not d.running
    # refused before any allocation: nothing but lookups happened
    assert all(c.startswith(("cuLibrary", "cuDevicePrimary")) for c, _ in fake.calls[calls:])
    # the same table on device 1's dispatcher: only the device-0 entry is refused
    d1 = _dispatcher(app, 1)
    d1.function_table.add_device("rpc_increment", inc0)
    d1.function_table.add_device("echo", echo1)
    with pytest.raises(
        InvalidArgumentError, match=r"'rpc_increment' \(looked up with .*device=0\)"
    ):
        d1.start()
    # a bare int carries no GPU: then the value is checked against the module's handlers there
    d2 = _dispatcher(app, 0)
    d2.function_table.add_device("echo", int(echo1))
    with pytest.raises(InvalidArgumentError, match=r"'echo' at .* of device 1\)"):
        d2.start()
    # and the right addresses pass the check on each device
    for device in (0, 1):
        good = _dispatcher(app, device)
        for name in ("echo", "rpc_increment"):
            good.function_table.add_device(name, rt.get_device_handler(app, name, device=device))
        good._check_table(good._resolve_library())


@pytest.mark.toolchain
def test_a_launcher_kernel_of_another_arch_is_refused_at_start(
    use_driver: UseDriver, links: list[str], app: types.ModuleType
) -> None:
    use_driver(FakeDriver(MIXED))
    kernel1 = rt.get_device_kernel(app, "single_thread_dispatcher", device=1)

    class Launcher:
        kernel = kernel1

        def __call__(self, args: Any) -> None:
            raise AssertionError("never called: start() refuses first")

    for module in (app, None):  # with module=, and with the launcher's kernel alone
        d = rt.Dispatcher(rt.DispatcherConfig(device=0, num_slots=32, slot_size=128), module=module)
        d.set_unified_launch(Launcher())
        with pytest.raises(LibraryConflictError, match=r"linked for sm_80, but device 0 is sm_90"):
            d.start()
    # on its own GPU the same launcher passes the check
    d = _dispatcher(app, 1)
    d.set_unified_launch(Launcher())
    assert d._resolve_library() is kernel1.library


@pytest.mark.toolchain
def test_a_device_that_does_not_exist_is_named(
    use_driver: UseDriver, links: list[str], app: types.ModuleType
) -> None:
    use_driver(FakeDriver(MIXED))
    with pytest.raises(InvalidArgumentError, match=r"device=3: this process sees 2 CUDA"):
        _dispatcher(app, 3).start()
    rt.get_device_handler(app, "echo", device=0)  # the registry is not empty now
    with pytest.raises(InvalidArgumentError, match=r"device=3: this process sees 2 CUDA"):
        rt.get_device_handler(app, "echo", device=3)
    assert links == ["sm_90"]


def test_test_server_devices(use_driver: UseDriver) -> None:
    from skbuild_cudaq.cli import server as server_cli

    use_driver(FakeDriver(MIXED))
    parse = server_cli._build_parser().parse_args
    assert server_cli._devices_to_serve(parse(["--devices=all"])) == [0, 1]
    assert server_cli._devices_to_serve(parse(["--devices=1,0"])) == [1, 0]
    assert server_cli._devices_to_serve(parse(["--device=1"])) is None  # one GPU: device 1
    assert server_cli._devices_to_serve(parse([])) is None
