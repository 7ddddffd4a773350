"""Library/Kernel without a GPU, and the driver-error helper (mocked driver, error paths only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _fake_driver import OK, Result, UseDriver, startup_driver
from gpu_kernels.testbins import DeviceBinaries

import skbuild_cudaq.realtime as rt
from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime.errors import CUDAError, InvalidArgumentError, RealtimeError
from skbuild_cudaq.realtime.launch import LaunchConfig
from skbuild_cudaq.realtime.library import Library
from skbuild_cudaq.realtime.link.cache import LinkCache
from skbuild_cudaq.realtime.link.linker import LinkOptions


def test_importing_realtime_touches_no_cuda() -> None:
    import subprocess
    import sys

    code = (
        "import sys, skbuild_cudaq.realtime as rt; rt.LaunchConfig; rt.get_library; rt.LinkError;"
        "print(any(m.startswith('cuda') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_check_turns_results_into_cuda_errors(use_driver: UseDriver) -> None:
    use_driver(startup_driver([], retain=None))
    assert _driver.check((Result(0, "CUDA_SUCCESS"), 42), "cuX") == 42
    assert _driver.check((Result(0, "CUDA_SUCCESS"), 1, 2), "cuX") == (1, 2)
    assert _driver.check(Result(0, "CUDA_SUCCESS"), "cuX") is None
    with pytest.raises(CUDAError) as info:
        _driver.check((Result(201, "CUDA_ERROR_INVALID_CONTEXT"), None), "cuLibraryGetKernel")
    assert info.value.name == "CUDA_ERROR_INVALID_CONTEXT"
    assert info.value.code == 201
    assert (
        str(info.value) == "cuLibraryGetKernel failed: CUDA_ERROR_INVALID_CONTEXT (201): described"
    )
    assert not isinstance(info.value, ValueError)


@pytest.mark.toolchain
def test_not_found_is_invalid_argument_listing_kernels(
    bins: DeviceBinaries, monkeypatch: pytest.MonkeyPatch, use_driver: UseDriver
) -> None:
    cubin = rt.link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=LinkCache(None)).cubin
    fake = use_driver(startup_driver([], retain=None))
    fake.cuLibraryGetKernel = lambda lib, name: (Result(500, "CUDA_ERROR_NOT_FOUND"), None)
    monkeypatch.setattr(_driver, "ensure_context", lambda device=0: 1)
    with Library.from_cubin(cubin) as lib:
        with pytest.raises(InvalidArgumentError) as info:
            lib.get_kernel("no_such_kernel")
        assert isinstance(info.value, ValueError)
        assert "single_thread_dispatcher" in str(info.value)
        assert set(info.value.available) >= {
            "cudaq_realtime_unified_dispatch",
            "single_thread_dispatcher",
        }
        with pytest.raises(InvalidArgumentError, match="that is a handler"):
            lib.get_kernel("cudaq_handler_echo")
    # any other failure is a CUDAError with its name, not an invalid argument
    fake.cuLibraryGetKernel = lambda lib, name: (Result(201, "CUDA_ERROR_INVALID_CONTEXT"), None)
    with Library.from_cubin(cubin) as lib:
        with pytest.raises(CUDAError, match="CUDA_ERROR_INVALID_CONTEXT") as err:
            lib.get_kernel("single_thread_dispatcher")
        assert not isinstance(err.value, ValueError)


@pytest.mark.toolchain
def test_library_exists_and_links_without_a_gpu(bins: DeviceBinaries) -> None:
    lib = Library(bins.app, arch="sm_90", cache=LinkCache(None))
    assert repr(lib).endswith("lazy>")
    assert lib.symbols.handlers == ("echo", "rpc_increment")
    lib.close()
    lib.close()  # idempotent
    with pytest.raises(RealtimeError, match="closed"):
        _ = lib.cubin


def test_launch_config_validation() -> None:
    cfg = LaunchConfig(grid=4, block=(32, 2), cluster=2)
    assert (cfg.grid_dim, cfg.block_dim, cfg.cluster_dim) == ((4, 1, 1), (32, 2, 1), (2, 1, 1))
    with pytest.raises(InvalidArgumentError, match="not a multiple"):
        LaunchConfig(grid=3, block=32, cluster=2).validate()
    with pytest.raises(InvalidArgumentError, match="grid must be"):
        LaunchConfig(grid=0, block=32).validate()


# -- start-up: the link runs on a worker thread while the context is created ---------------------


def _link_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name == "skbuild-cudaq-link"]


@pytest.mark.toolchain
def test_load_links_while_the_context_is_created(
    bins: DeviceBinaries, monkeypatch: pytest.MonkeyPatch, use_driver: UseDriver, tmp_path: Path
) -> None:
    import threading

    from skbuild_cudaq.realtime.link import linker as link_module

    events: list[str] = []
    linked = threading.Event()
    real_link = link_module.link_device_code

    def link_and_tell(*args: Any, **kwargs: Any) -> Any:
        result = real_link(*args, **kwargs)
        events.append(f"linked for {result.arch}")
        linked.set()
        return result

    def retain(dev: int) -> Any:
        events.append("retain started")
        # the link must finish while the context is being created; a sequential
        # implementation would never set the event here
        events.append("link done during retain" if linked.wait(60) else "retain timed out")
        return (OK, "ctx")

    monkeypatch.setattr(link_module, "link_device_code", link_and_tell)
    use_driver(startup_driver(events, retain))
    lib = Library(bins.app, cache=LinkCache(tmp_path / "cache"))
    assert lib.load() == "library-handle"
    assert events.index("minor") < events.index("retain started")  # arch known first
    assert "link done during retain" in events
    assert "linked for sm_90" in events
    assert events[-1] == "cuLibraryLoadData"
    assert lib.symbols.kernels  # the cubin is the real link's
    assert _link_threads() == []
    lib.close()


@pytest.mark.toolchain
def test_load_reports_the_context_error_and_waits_for_the_worker(
    bins: DeviceBinaries, use_driver: UseDriver, tmp_path: Path
) -> None:
    events: list[str] = []

    def retain(dev: int) -> Any:
        return (Result(2, "CUDA_ERROR_OUT_OF_MEMORY"), None)

    use_driver(startup_driver(events, retain))
    lib = Library(bins.app, cache=LinkCache(tmp_path / "cache"))
    with pytest.raises(CUDAError, match="cuDevicePrimaryCtxRetain failed: CUDA_ERROR_OUT_OF_MEMO"):
        lib.load()
    assert _link_threads() == []  # the worker was waited for, not left running
    assert "cuLibraryLoadData" not in events


def test_load_reraises_the_link_error_after_the_context(
    use_driver: UseDriver, tmp_path: Path
) -> None:
    from skbuild_cudaq.realtime.errors import DeviceCodeError

    events: list[str] = []

    def retain(dev: int) -> Any:
        events.append("retain")
        return (OK, "ctx")

    not_elf = tmp_path / "not_an_extension.so"
    not_elf.write_bytes(b"this is not an ELF file")
    use_driver(startup_driver(events, retain))
    lib = Library(not_elf, cache=LinkCache(None))
    with pytest.raises(DeviceCodeError, match=r"not_an_extension\.so"):
        lib.load()
    assert "retain" in events
    assert "cuLibraryLoadData" not in events
    assert _link_threads() == []


def test_the_lookup_path_imports_only_light_modules() -> None:
    """What get_device_kernel's caller imports before the worker thread takes over.

    The fatbin reader, the link cache (hashlib) and nvJitLink are imported on the
    worker thread, overlapped with context creation; the caller's own imports are
    on the start-up critical path and must stay small.
    """
    import subprocess
    import sys

    code = (
        "import sys; before = set(sys.modules)\n"
        "import skbuild_cudaq.realtime as rt; rt.get_device_kernel\n"
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    ours = {m for m in out.stdout.split() if m.startswith("skbuild_cudaq")}
    assert ours <= {
        "skbuild_cudaq",
        "skbuild_cudaq._paths",
        "skbuild_cudaq._records",
        "skbuild_cudaq.errors",
        "skbuild_cudaq.realtime",
        "skbuild_cudaq.realtime._arguments",
        "skbuild_cudaq.realtime.link",
        "skbuild_cudaq.realtime.link._binary",
        "skbuild_cudaq.realtime._closing",
        "skbuild_cudaq.realtime._driver",
        "skbuild_cudaq.realtime.errors",
        "skbuild_cudaq.realtime.library",
        "skbuild_cudaq.realtime.library.loaded",
        "skbuild_cudaq.realtime.library.registry",
        "skbuild_cudaq.realtime.library.symbols",
    }, ours
    heavy = {"dataclasses", "hashlib", "skbuild_cudaq.fatbin", "cuda.bindings.nvjitlink"}
    assert not heavy & set(out.stdout.split())


def test_load_with_a_current_context_creates_none(use_driver: UseDriver, tmp_path: Path) -> None:
    events: list[str] = []

    def retain(dev: int) -> Any:
        events.append("retain")
        return (OK, "ctx")

    fake = startup_driver(events, retain)
    fake.cuCtxGetCurrent = lambda: (OK, 0x1234)  # a context is current already
    fake.cuCtxGetDevice = lambda: (OK, 0)
    use_driver(fake)
    not_elf = tmp_path / "not_an_extension.so"
    not_elf.write_bytes(b"not ELF")
    from skbuild_cudaq.realtime.errors import DeviceCodeError

    with pytest.raises(DeviceCodeError):  # the worker's error, raised by load()
        Library(not_elf, cache=LinkCache(None)).load()
    assert "retain" not in events
    assert _link_threads() == []


def test_link_worker_imports_the_next_step_after_the_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The link worker imports what a Dispatcher needs once the cubin is there (while the
    caller waits for the context), and a module that fails to import never fails the link."""
    import sys
    import threading

    from skbuild_cudaq.realtime.library import loaded

    (tmp_path / "next_step_probe.py").write_text(
        "import threading\nIMPORTED_ON = threading.current_thread().name\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "next_step_probe", raising=False)
    monkeypatch.setattr(loaded, "_NEXT_STEP_MODULES", ("no_such_module_xyz", "next_step_probe"))
    order: list[str] = []

    def link() -> bytes:
        order.append("linked")
        assert "next_step_probe" not in sys.modules  # only after the link
        return b"cubin"

    job = loaded._LinkJob(link)
    job.go()
    assert job.result() == b"cubin"
    assert order == ["linked"]
    probe = sys.modules["next_step_probe"]
    assert probe.IMPORTED_ON == "skbuild-cudaq-link"
    assert threading.current_thread().name != probe.IMPORTED_ON


@pytest.mark.parametrize("data", [b"", b"not an ELF file", b"\x7fELF\x02\x01\x01" + bytes(9)])
def test_unreadable_cubin_symbols_are_one_realtime_error(data: bytes) -> None:
    from skbuild_cudaq.realtime.errors import RealtimeError
    from skbuild_cudaq.realtime.library import cubin_symbols

    with pytest.raises(RealtimeError, match="the linked cubin is not a readable ELF file"):
        cubin_symbols(data)


@pytest.mark.toolchain
def test_a_module_a_running_dispatcher_serves_from_is_not_unloaded(
    bins: DeviceBinaries, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, use_driver: UseDriver
) -> None:
    """close() and release_library() refuse while a dispatcher holds the module (its
    kernel may be running the module's code), and release nothing; once it lets go, both
    work. A closed module cannot be held (a dispatcher's start() fails)."""
    import types

    from _fake_driver import FakeDriver

    monkeypatch.setenv("SKBUILD_CUDAQ_LINK_CACHE", str(tmp_path / "cache"))
    use_driver(FakeDriver())
    module = types.ModuleType("app")
    module.__file__ = str(bins.app)
    rt.release_library()
    try:
        library = rt.get_library(module, device=0)
        library._hold()
        with pytest.raises(RealtimeError, match="in use by a running Dispatcher: stop"):
            library.close()
        with pytest.raises(RealtimeError, match="in use by a running Dispatcher"):
            rt.release_library()
        assert not library.closed and rt.get_library(module, device=0) is library
        library._let_go()
        rt.release_library()
        assert library.closed
        with pytest.raises(RealtimeError, match="is closed"):
            library._hold()
    finally:
        rt.release_library()


def test_a_lookup_of_a_name_left_out_of_the_link_says_so(
    bins: DeviceBinaries, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, use_driver: UseDriver
) -> None:
    """On an sm_80 GPU (device 1 of the fake driver) a module with an sm_90-only container
    serves what its other containers define; a lookup of any other name says that container
    was left out of this GPU's link, and how to serve it here. On sm_90 nothing is left out."""
    import types

    from _fake_driver import FakeDriver

    monkeypatch.setenv("SKBUILD_CUDAQ_LINK_CACHE", str(tmp_path / "cache"))
    fake = use_driver(FakeDriver())
    fake.cuLibraryGetKernel = lambda lib, name: (  # type: ignore[method-assign]
        (OK, f"{lib}:{name.decode()}")
        if name == b"single_thread_dispatcher"
        else (Result(500, "CUDA_ERROR_NOT_FOUND"), None)
    )
    module = types.ModuleType("mixed")
    module.__file__ = str(bins.mixed)
    rt.release_library()
    try:
        assert rt.get_device_kernel(module, "single_thread_dispatcher", device=1).name
        assert rt.get_device_handler(module, "rpc_increment", device=1)
        with pytest.raises(InvalidArgumentError) as info:
            rt.get_device_kernel(module, "cluster_report", device=1)
        text = str(info.value)
        assert text.startswith(f"no kernel 'cluster_report' in the device code of {bins.mixed}")
        assert "; container libmixed.so:" in text
        assert (
            "(lto-ir sm_90) was left out of the link for sm_80 (no code for it), so a name "
            'defined there is unavailable on this GPU: add "80" to that source\'s '
            "architectures (pyproject.toml: [tool.cudaq.dispatch-kernels]; CMake: "
            "ARCHITECTURES), or run on a GPU of sm_90 or newer"
        ) in text
        library = rt.get_library(module, device=1)
        assert library.arch == "sm_80" and len(library.left_out) == 1
        assert info.value.left_out == library.left_out
        with pytest.raises(InvalidArgumentError, match="was left out of the link for sm_80") as h:
            rt.get_device_handler(module, "no_such_handler", device=1)
        assert h.value.left_out == library.left_out
        # on the sm_90 GPU the whole module links: a name that is not there is just absent
        with pytest.raises(InvalidArgumentError) as absent:
            rt.get_device_kernel(module, "no_such_kernel", device=0)
        assert "left out" not in str(absent.value) and absent.value.left_out == ()
        assert rt.get_library(module, device=0).left_out == ()
    finally:
        rt.release_library()
