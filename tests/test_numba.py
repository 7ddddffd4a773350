"""Python handlers (skbuild_cudaq.numba): decorators, numba-cuda to LTO-IR with our C ABI and
export globals, nvJitLink linking them with the built-in kernel (issue 53).

Toolchain tests need numba-cuda with NVVM and nvJitLink (the ``test`` extra installs them);
none needs a GPU.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skbuild_cudaq.numba import (
    SHAPE_LAUNCH,
    SHAPE_THREAD,
    PyHandler,
    handler,
    rank,
    size,
    status,
    thread_handler,
    words,
)

HANDLERS = textwrap.dedent(
    """
    from skbuild_cudaq.numba import handler, rank, size, status, thread_handler

    @handler
    def py_rpc_increment(args, result):
        n = min(args.size, result.size)
        for i in range(rank(), n, size()):
            result[i] = args[i] + 1
        return n

    @thread_handler
    def py_echo(args, result):
        n = min(args.size, result.size)
        if n == 0:
            return status(7)
        for i in range(n):
            result[i] = args[i]
        return n

    @handler(args="float32", result="float32")
    def py_scale(args, result):
        n = min(args.size, result.size)
        for i in range(rank(), n, size()):
            result[i] = args[i] * 2.0
        return n
    """
)

TYPING_ERROR = textwrap.dedent(
    """
    from skbuild_cudaq.numba import handler

    @handler
    def py_fine(args, result):
        return 0

    @handler
    def py_broken(args, result):
        return args.no_such_attribute
    """
)


def _numba_cuda() -> None:
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        load_nvidia_dynamic_lib("nvvm")
    except Exception as exc:
        pytest.skip(f"no NVVM (nvidia-nvvm): {exc}")


def _compile_cli(source: Path, out: Path, *archs: str) -> subprocess.CompletedProcess[str]:
    arch_args = [a for arch in archs for a in ("--arch", arch)]
    return subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq.numba", str(source), *arch_args,
         "-o", str(out), "--record", f"{out}.json", "--depfile", f"{out}.d",
         "--project-dir", str(source.parent), "--target", "_core"],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Decorators (no numba)
# ---------------------------------------------------------------------------------------------
def test_decorators_mark_the_function_with_its_name_and_shape() -> None:
    def py_a(args: bytes, result: bytearray) -> int:
        return len(args)

    launch, thread = handler(py_a), thread_handler(py_a)
    assert isinstance(launch, PyHandler) and launch.name == "py_a"
    assert (launch.shape, thread.shape) == (SHAPE_LAUNCH, SHAPE_THREAD)
    assert launch(b"abc", bytearray(3)) == 3  # still callable on the CPU
    typed = handler(args="float32", result="int16")(py_a)
    assert (typed.args, typed.result) == ("float32", "int16")
    assert (rank(), size()) == (0, 1)


def test_the_lto_ir_cache_key_covers_this_packages_own_device_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cached handler's LTO-IR holds the C ABI wrapper and the dispatch API's intrinsics
    too, which the code digest cannot follow: another version of those sources is another
    key, the same sources the same key."""
    from skbuild_cudaq.numba import _compile

    def py_k(args: bytes, result: bytearray) -> int:
        return len(args)

    h = handler(py_k)
    key = _compile.cache_key(h, 90)
    assert _compile.cache_key(h, 90) == key and _compile.cache_key(h, 80) != key
    monkeypatch.setattr(_compile, "_OWN_DIGEST", {"digest": "another dispatch.py"})
    assert _compile.cache_key(h, 90) != key
    monkeypatch.setattr(_compile, "_OWN_DIGEST", {})  # read from the files again
    assert _compile.cache_key(h, 90) == key


def test_status_packs_the_code_above_the_count() -> None:
    assert status(7) == 7 << 32
    assert status(3, 5) == (3 << 32) | 5


def test_words_are_the_whole_8_byte_words_over_the_same_memory() -> None:
    import numpy as np

    data = np.arange(20, dtype=np.uint8)
    got = words(data)
    assert (got.dtype, got.size) == (np.uint64, 2)  # 20 bytes: two whole words
    assert got.tobytes() == data[:16].tobytes()
    got[1] = 0  # a view: the store is the array's
    assert data[8:16].tolist() == [0] * 8 and data[16:].tolist() == [16, 17, 18, 19]
    assert words(np.zeros(3, dtype=np.uint32)).size == 1  # of any element type: 12 bytes
    assert words(np.zeros(7, dtype=np.uint8)).size == 0
    with pytest.raises(ValueError, match="contiguous"):  # never a copy that drops stores
        words(np.zeros(16, dtype=np.uint8)[::2])


def test_an_unknown_element_type_is_refused_naming_the_accepted_ones() -> None:
    def py_c(args: bytes, result: bytearray) -> int:
        return 0

    with pytest.raises(ValueError, match=r"args='complex64' is not an element type; use one of"):
        handler(args="complex64")(py_c)
    with pytest.raises(ValueError, match=r"name must be an identifier \(the C symbol\)"):
        handler(lambda a, r: 0)


def test_importing_the_module_loads_no_numba_and_no_cuda() -> None:
    code = (
        "import sys, skbuild_cudaq.numba\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'cuda')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# Compiled and linked (numba-cuda, NVVM, nvJitLink; no GPU)
# ---------------------------------------------------------------------------------------------
@pytest.mark.toolchain
def test_cli_compiles_each_handler_and_nvjitlink_finds_them(tmp_path: Path) -> None:
    _numba_cuda()
    from skbuild_cudaq.fatbin import read_fatbin_file
    from skbuild_cudaq.realtime.library.symbols import cubin_symbols
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.device_code import DeviceCode, LinkInput
    from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

    source = tmp_path / "handlers.py"
    source.write_text(HANDLERS)
    out = tmp_path / "build" / "handlers.fatbin"
    done = _compile_cli(source, out, "80", "90")
    assert done.returncode == 0, done.stderr
    containers = read_fatbin_file(out)
    assert len(containers) == 3  # one per handler, one entry per architecture
    assert all(sorted(e.arch for e in c.entries) == [80, 90] for c in containers)
    import json

    record = json.loads(Path(f"{out}.json").read_text())
    assert record["source"] == "handlers.py"
    assert record["handlers"] == ["py_echo", "py_rpc_increment", "py_scale"]
    assert record["compiler"].startswith("numba-cuda ")
    assert str(source) in Path(f"{out}.d").read_text()
    code = DeviceCode(out, tuple(LinkInput(f"h:{i}", c) for i, c in enumerate(containers)))
    for arch in ("sm_80", "sm_90"):
        result = link_device_code(code, LinkOptions(arch=arch), cache=LinkCache(None))
        symbols = cubin_symbols(result.cubin)
        assert set(symbols.handlers) == {"py_echo", "py_rpc_increment", "py_scale"}
        assert symbols.thread_handlers == frozenset({"py_echo"})
        assert "cudaq_realtime_unified_dispatch" in symbols.kernels


@pytest.mark.toolchain
def test_a_typing_error_is_one_line_naming_the_function_the_file_and_numbas_reason(
    tmp_path: Path,
) -> None:
    _numba_cuda()
    source = tmp_path / "broken.py"
    source.write_text(TYPING_ERROR)
    done = _compile_cli(source, tmp_path / "broken.fatbin", "80")
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    (line,) = lines
    assert line.startswith("skbuild-cudaq: error: numba-cuda could not compile handler py_broken")
    assert "broken.py for CMake target _core" in line
    assert "no_such_attribute" in line and "line 10" in line
    assert not (tmp_path / "broken.fatbin").exists()


@pytest.mark.toolchain
def test_a_file_without_handlers_says_how_to_declare_one(tmp_path: Path) -> None:
    _numba_cuda()
    source = tmp_path / "empty.py"
    source.write_text("def helper(x):\n    return x\n")
    done = _compile_cli(source, tmp_path / "empty.fatbin", "80")
    assert done.returncode == 1
    assert "empty.py defines no handler: decorate a function with" in done.stderr


@pytest.mark.toolchain
def test_device_code_of_notebook_handlers_links_alone_with_the_built_in_kernel() -> None:
    _numba_cuda()
    from skbuild_cudaq.numba import device_code
    from skbuild_cudaq.realtime.library.symbols import cubin_symbols
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

    @thread_handler
    def py_notebook_twice(args, result):  # type: ignore[no-untyped-def]
        n = min(args.size, result.size)
        for i in range(n):
            result[i] = args[i] * 2
        return n

    code = device_code(py_notebook_twice, architectures=(80,))
    result = link_device_code(code, LinkOptions(arch="sm_90"), cache=LinkCache(None))
    assert cubin_symbols(result.cubin).handlers == ("py_notebook_twice",)


@pytest.mark.toolchain
def test_the_notebook_path_links_alone_and_with_an_extensions_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function defined at run time becomes a binary file the lookups take: alone with the
    built-in kernel, and beside an extension module's kernels and handlers (one module); its
    link is cached like every link, the key covering the function's code."""
    _numba_cuda()
    from skbuild_cudaq.build._device_info import read_records
    from skbuild_cudaq.numba import device_binary
    from skbuild_cudaq.realtime.library.symbols import cubin_symbols
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

    monkeypatch.setenv("SKBUILD_CUDAQ_PYTHON_DEVICE_DIR", str(tmp_path / "nb"))

    def make(add: int) -> PyHandler:
        def py_notebook_add(args, result):  # type: ignore[no-untyped-def]
            n = min(args.size, result.size)
            for i in range(n):
                result[i] = args[i] + add
            return n

        return thread_handler(py_notebook_add)

    alone = device_binary(make(1))
    assert alone == device_binary(make(1))  # same code, same file
    assert read_records(alone)[0]["handlers"] == ["py_notebook_add"]
    cache = LinkCache(tmp_path / "cache")
    first = link_device_code(alone, LinkOptions(arch="sm_90"), cache=cache)
    assert cubin_symbols(first.cubin).handlers == ("py_notebook_add",)
    again = link_device_code(alone, LinkOptions(arch="sm_90"), cache=cache)
    assert not first.cache_hit and again.cache_hit
    other = device_binary(make(2))  # another function body: another file, another link
    assert other != alone
    assert not link_device_code(other, LinkOptions(arch="sm_90"), cache=cache).cache_hit
    # beside a built module's device code (a module of Python handlers built like a wheel's)
    source = tmp_path / "handlers.py"
    source.write_text(HANDLERS)
    fatbin = tmp_path / "ext.fatbin"
    assert _compile_cli(source, fatbin, "80").returncode == 0
    from skbuild_cudaq.numba._notebook import elf_with_sections

    extension = tmp_path / "ext.so"
    extension.write_bytes(elf_with_sections([("__nv_relfatbin", fatbin.read_bytes())]))
    both = device_binary(make(1), extension=extension)
    symbols = cubin_symbols(link_device_code(both, LinkOptions(arch="sm_80"), cache=cache).cubin)
    assert set(symbols.handlers) == {"py_echo", "py_rpc_increment", "py_scale", "py_notebook_add"}


@pytest.mark.toolchain
def test_compiling_needs_no_nvrtc(tmp_path: Path) -> None:
    """numba-cuda asks NVRTC which architectures exist before NVVM compiles; a project whose
    device code is all Python has no NVRTC in its build environment: the compile must not ask."""
    _numba_cuda()
    source = tmp_path / "handlers.py"
    source.write_text(HANDLERS)
    script = (
        "import sys\n"
        "from cuda.bindings import nvrtc\n"
        "def gone(*a, **k):\n"
        "    raise RuntimeError('no NVRTC in this environment')\n"
        "for name in dir(nvrtc):\n"
        "    if name.startswith('nvrtc') and not isinstance(getattr(nvrtc, name), type):\n"
        "        setattr(nvrtc, name, gone)\n"
        "from cuda import pathfinder\n"
        "find = pathfinder.load_nvidia_dynamic_lib\n"
        "def no_nvrtc(name, *a, **k):\n"
        "    if name == 'nvrtc':\n"
        "        raise pathfinder.DynamicLibNotFoundError('no libnvrtc here')\n"
        "    return find(name, *a, **k)\n"
        "pathfinder.load_nvidia_dynamic_lib = no_nvrtc\n"
        "from skbuild_cudaq.numba.__main__ import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(source), "--arch", "80", "--arch", "90",
         "-o", str(tmp_path / "h.fatbin")],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "h.fatbin").stat().st_size > 0


@pytest.mark.toolchain
def test_a_dispatch_kernel_written_in_python_links_with_handlers_of_both_kinds(
    tmp_path: Path,
) -> None:
    """example_app's py_single_thread_dispatcher: compiled by the build's CLI, named in the
    record as a kernel, an extern "C" kernel of the linked cubin beside Python handlers."""
    _numba_cuda()
    import json

    from skbuild_cudaq.fatbin import read_fatbin_file
    from skbuild_cudaq.realtime.library.symbols import cubin_symbols
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.device_code import DeviceCode, LinkInput
    from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

    src = Path(__file__).resolve().parent.parent / "example_app" / "src"
    inputs = []
    for name in ("py_dispatcher.py", "py_handlers.py"):
        out = tmp_path / f"{name}.fatbin"
        done = _compile_cli(src / name, out, "80")
        assert done.returncode == 0, done.stderr
        inputs += [LinkInput(f"{name}:{i}", c) for i, c in enumerate(read_fatbin_file(out))]
    record = json.loads((tmp_path / "py_dispatcher.py.fatbin.json").read_text())
    assert (record["kernels"], record["handlers"]) == (["py_single_thread_dispatcher"], [])
    code = DeviceCode(tmp_path, tuple(inputs))
    cubin = link_device_code(code, LinkOptions(arch="sm_90"), cache=LinkCache(None)).cubin
    symbols = cubin_symbols(cubin)
    assert "py_single_thread_dispatcher" in symbols.kernels
    assert "py_single_thread_dispatcher_body" not in symbols.kernels  # inlined, not an entry
    assert set(symbols.handlers) == {
        "py_rpc_increment",
        "py_rpc_increment_thread",
        "py_steane_decode",
    }


def _container_with_code_version(minor: int) -> bytes:
    """A fatbin container of (stand-in) LTO-IR whose header says code version 1.<minor>."""
    from skbuild_cudaq.build._container import make_ltoir_container

    ltoir = bytes([0xED, 0x43, 0x4E, 0x7F, 1, minor, 2, 0x62]) + bytes(56)
    return make_ltoir_container([(80, ltoir)])


def test_lto_ir_newer_than_the_run_times_nvjitlink_fails_the_build_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Item 5: NVVM 13.5's LTO-IR (code version 1.67) would not link with the run time's
    nvJitLink 13.0: the build stops naming both versions and the pin."""
    from skbuild_cudaq.errors import ToolchainError
    from skbuild_cudaq.numba._compile import check_versions

    monkeypatch.delenv("SKBUILD_CUDAQ_NVJITLINK", raising=False)
    check_versions(_container_with_code_version(65))  # NVVM 13.0: fine
    with pytest.raises(ToolchainError) as info:
        check_versions(_container_with_code_version(67))
    message = str(info.value)
    assert message.startswith("NVVM of CUDA 13.5 wrote this LTO-IR (code version 1.67), newer")
    assert "than nvJitLink 13.0" in message and "'nvidia-nvvm==13.0.*'" in message
    monkeypatch.setenv("SKBUILD_CUDAQ_NVJITLINK", "13.5")  # every machine has 13.5: allowed
    check_versions(_container_with_code_version(67))


@pytest.mark.toolchain
def test_lto_ir_newer_than_nvjitlink_fails_the_link_naming_both(tmp_path: Path) -> None:
    """At link time the run time checks a Python handler's container like nvcc's."""
    from skbuild_cudaq.fatbin import split_containers
    from skbuild_cudaq.realtime.errors import VersionMismatchError
    from skbuild_cudaq.realtime.link._nvjitlink import nvjitlink_version
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.device_code import DeviceCode, LinkInput
    from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

    try:
        major, minor = nvjitlink_version()
    except ImportError as exc:
        pytest.skip(str(exc))
    (container,) = split_containers(_container_with_code_version(99), "test")
    code = DeviceCode(tmp_path / "m.so", (LinkInput("<python handler>", container),))
    with pytest.raises(VersionMismatchError) as info:
        link_device_code(code, LinkOptions(arch="sm_90"), cache=LinkCache(None))
    assert "code version 1.99" in str(info.value)
    assert f"nvJitLink {major}.{minor}" in str(info.value)


def test_the_handler_switch_scan_finds_python_handlers_by_shape() -> None:
    """A target with CUDA sources gets a handler switch; its scan reads a .py source's
    decorated functions (the dispatch kernel is no handler)."""
    from skbuild_cudaq.build._handler_switch import exported_python_handlers

    src = Path(__file__).resolve().parent.parent / "example_app" / "src"
    text = (src / "py_handlers.py").read_text(encoding="utf-8")
    assert exported_python_handlers(text) == ["py_rpc_increment_thread", "py_steane_decode"]
    assert exported_python_handlers(text, shape="launch") == ["py_rpc_increment"]
    kernel = (src / "py_dispatcher.py").read_text(encoding="utf-8")
    assert exported_python_handlers(kernel, shape="any") == []
    assert (
        exported_python_handlers("@sk.handler(args='float32')\n@other\ndef py_x(a, r): ...") == []
    )
    assert exported_python_handlers(
        "@sk.handler(args='float32')\n@other\ndef py_x(a, r): ...", shape="launch"
    ) == ["py_x"]


def test_the_dispatch_helpers_say_they_run_on_the_gpu() -> None:
    """On the CPU each helper of skbuild_cudaq.numba.dispatch (lookup_cache, the optional
    cache of validate_request included) only says where it runs."""
    from skbuild_cudaq.numba import dispatch

    with pytest.raises(RuntimeError, match=r"dispatch\.lookup_cache runs on the GPU"):
        dispatch.lookup_cache()
    with pytest.raises(RuntimeError, match=r"dispatch\.validate_request runs on the GPU"):
        dispatch.validate_request(0, 128, 0, 1, dispatch.lookup_cache)
    assert "lookup_cache" in dispatch.__all__
