"""The setuptools front door: hook, validation, wheels of tests/packages/setuptools_pkg, GPU run."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from skbuild_cudaq.errors import SettingsError
from skbuild_cudaq.setuptools._plan import check_for_setuptools, extension_flags
from skbuild_cudaq.setuptools.build_ext import CudaqBuildExtMixin
from skbuild_cudaq.setuptools.command import build_cudaq_kernels
from skbuild_cudaq.setuptools.hook import finalize_distribution_options, project_uses_cudaq

PACKAGE = Path(__file__).resolve().parent / "packages" / "setuptools_pkg"
EXT = "setuptools_pkg._core"
KERNEL = "src/single_thread_dispatcher.cu"
LINK_ARGS = ("--arch", "sm_90", "-o")
PIP_WHEEL = (sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps")
FATBIN_MAGIC = 0xBA55ED50
KIND_LTO_IR = 8


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def relfatbin_containers(binary: Path) -> list[bytes]:
    """Every fatbin container in the binary's __nv_relfatbin sections (read with pyelftools)."""
    from elftools.elf.elffile import ELFFile

    with binary.open("rb") as f:
        elf = ELFFile(f)
        data = b"".join(s.data() for s in elf.iter_sections() if s.name == "__nv_relfatbin")
    containers, off = [], 0
    while off < len(data):
        if data[off : off + 8] == bytes(8):
            off += 8
            continue
        magic, _version, header_size, size = struct.unpack_from("<IHHQ", data, off)
        assert magic == FATBIN_MAGIC, f"bad container magic at {off}"
        containers.append(data[off : off + header_size + size])
        off += header_size + size
    return containers


def container_entries(container: bytes) -> list[tuple[int, int]]:
    """``(kind, arch)`` of each entry of one container."""
    header_size = struct.unpack_from("<H", container, 6)[0]
    entries, off = [], header_size
    while off < len(container):
        kind, _ver, entry_header, payload = struct.unpack_from("<HHIQ", container, off)
        arch = struct.unpack_from("<I", container, off + 28)[0]
        entries.append((kind, arch))
        off += entry_header + payload
    return entries


def elf_symbols(path: Path) -> dict[str, str]:
    """name -> symbol type (STT_FUNC, STT_OBJECT, ...) of every defined symbol."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    found: dict[str, str] = {}
    with path.open("rb") as f:
        for section in ELFFile(f).iter_sections():
            if isinstance(section, SymbolTableSection):
                for sym in section.iter_symbols():
                    if sym.name and sym["st_shndx"] != "SHN_UNDEF":
                        found[sym.name] = sym["st_info"]["type"]
    return found


def run(cmd: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env}
    return subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, check=False, env=full_env, timeout=600
    )


def copy_package(dest: Path) -> Path:
    project = dest / "setuptools_pkg"
    shutil.copytree(PACKAGE, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so"))
    return project


def set_table(project: Path, table: str) -> None:
    """Replace the [tool.cudaq.dispatch-kernels] table of the copied project."""
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    head = text.split("[tool.cudaq.dispatch-kernels]")[0]
    pyproject.write_text(head + "[tool.cudaq.dispatch-kernels]\n" + table + "\n", encoding="utf-8")


class Built:
    """A wheel of setuptools_pkg, unpacked."""

    def __init__(self, project: Path, wheel: Path, site: Path) -> None:
        self.project, self.wheel, self.site = project, wheel, site
        self.extension = next((site / "setuptools_pkg").glob("_core.*.so"))

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        return run([sys.executable, "-c", code], cwd=self.site, PYTHONPATH=str(self.site))


def build_wheel(tmp: Path, builder: str) -> Built:
    project = copy_package(tmp)
    out = tmp / "dist"
    if builder == "pip":
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
        cmd += ["-w", str(out), str(project)]
    else:
        cmd = [sys.executable, "-m", "build", "--no-isolation", "--wheel", "-o", str(out)]
        cmd += [str(project)]
    proc = run(cmd, cwd=tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheel = next(out.glob("setuptools_pkg-*.whl"))
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return Built(project, wheel, site)


_BUILT: dict[str, Built] = {}


def _built(builder: str, factory: pytest.TempPathFactory) -> Built:
    if builder not in _BUILT:
        _BUILT[builder] = build_wheel(factory.mktemp(f"wheel-{builder}"), builder)
    return _BUILT[builder]


@pytest.fixture(scope="session", params=["pip", "build"])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The package built by `pip wheel` and by `python -m build` (no isolation)."""
    return _built(request.param, tmp_path_factory)


@pytest.fixture(scope="session")
def built_pip(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return _built("pip", tmp_path_factory)


# ---------------------------------------------------------------------------
# plain: the hook and the shared validation
# ---------------------------------------------------------------------------
def test_hook_ignores_projects_without_tool_cudaq(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from setuptools.dist import Distribution

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    dist = Distribution({"name": "x"})  # setuptools ran every hook, ours included
    assert not issubclass(dist.cmdclass.get("build_ext", object), CudaqBuildExtMixin)
    assert "build_cudaq_kernels" not in dist.cmdclass
    before = dict(dist.cmdclass)
    finalize_distribution_options(dist)
    assert dist.cmdclass == before
    assert not project_uses_cudaq(tmp_path / "missing.toml")
    (tmp_path / "pyproject.toml").write_text("[tool.cudaq\nbroken", encoding="utf-8")
    assert not project_uses_cudaq(tmp_path / "pyproject.toml")  # setuptools reports it


def test_hook_wraps_setuptools_and_user_build_ext(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from setuptools.command.build_ext import build_ext
    from setuptools.dist import Distribution

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.cudaq.dispatch-kernels]\n"p._c" = ["k.cu"]\n', encoding="utf-8"
    )
    dist = Distribution({"name": "x"})  # setuptools already ran the hook
    wrapped = dist.cmdclass["build_ext"]
    assert issubclass(wrapped, CudaqBuildExtMixin) and issubclass(wrapped, build_ext)
    assert dist.get_command_class("build_cudaq_kernels") is build_cudaq_kernels
    finalize_distribution_options(dist)  # idempotent
    assert dist.cmdclass["build_ext"] is wrapped

    class UserBuildExt(build_ext):
        pass

    dist = Distribution({"name": "x", "cmdclass": {"build_ext": UserBuildExt}})
    assert issubclass(dist.cmdclass["build_ext"], UserBuildExt)
    assert issubclass(dist.cmdclass["build_ext"], CudaqBuildExtMixin)


def test_unknown_extension_names_are_reported_together() -> None:
    with pytest.raises(SettingsError) as info:
        check_for_setuptools(["pkg._cor", "_core", "pkg._core", "zzz"], ["pkg._core", "pkg.other"])
    text = str(info.value)
    assert text.startswith("3 problems in [tool.cudaq] of pyproject.toml:")
    assert (
        "tool.cudaq.dispatch-kernels.pkg._cor: no extension named 'pkg._cor' in this project "
        "(extensions: 'pkg._core', 'pkg.other'); did you mean 'pkg._core'?"
    ) in text
    assert "tool.cudaq.dispatch-kernels._core: " in text
    assert "tool.cudaq.dispatch-kernels.zzz: " in text and "full name of an Extension" in text
    check_for_setuptools(["pkg._core"], ["pkg._core"])


def test_extension_flags_follow_distutils_order(tmp_path: Path) -> None:
    from setuptools import Extension

    ext = Extension(
        "p._c",
        ["a.cu"],
        include_dirs=[str(tmp_path / "inc")],
        define_macros=[("A", "1"), ("B", None)],
        undef_macros=["A"],
        extra_compile_args=["-O3", "-std=gnu++20", "-DC=3", "-I", str(tmp_path / "more")],
    )
    flags = extension_flags(ext)
    assert [m.option() for m in flags.macros] == ["-DA=1", "-DB", "-UA", "-DC=3"]
    assert flags.include_dirs == (str(tmp_path / "inc"), str(tmp_path / "more"))
    assert flags.std == "c++20"
    assert extension_flags(Extension("p._c", ["a.cu"])).std == "c++17"


# ---------------------------------------------------------------------------
# integration: wheels built by pip and by build
# ---------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.toolchain
def test_wheel_imports_and_embeds_one_container_per_kernel(built: Built) -> None:
    proc = built.python("import setuptools_pkg._core as m; print(m.__name__)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == EXT

    containers = relfatbin_containers(built.extension)
    # one container for the kernel, one for the .cu handler object, one for the handler
    # switch over its (launch-wide) export
    assert len(containers) == 3
    for container in containers:
        assert container_entries(container) == [(KIND_LTO_IR, 80)]
    fatbins = list(built.project.glob("build/temp*/cudaq/setuptools_pkg._core/kernels/*.fatbin"))
    assert len(fatbins) == 2  # the kernel and the switch
    assert all(f.read_bytes() in containers for f in fatbins)  # byte for byte


@pytest.mark.integration
@pytest.mark.toolchain
def test_wheel_module_has_no_executable_stack_and_no_stub_exports(built: Built) -> None:
    from elftools.elf.elffile import ELFFile

    with built.extension.open("rb") as f:
        elf = ELFFile(f)
        stacks = [s for s in elf.iter_segments() if s["p_type"] == "PT_GNU_STACK"]
        assert stacks and not stacks[0]["p_flags"] & 0x1  # no PF_X
        dynsym = elf.get_section_by_name(".dynsym")
        exported = {s.name for s in dynsym.iter_symbols() if s["st_shndx"] != "SHN_UNDEF"}
    assert not [n for n in exported if n.startswith("__cudaRegisterLinkedBinary_")]
    assert "PyInit__core" in exported


@pytest.mark.integration
@pytest.mark.toolchain
def test_inspect_cli_lists_the_containers(built: Built) -> None:
    proc = run(
        [sys.executable, "-m", "skbuild_cudaq", "inspect", str(built.extension), "--json"],
        cwd=built.site,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    containers = [c for section in data["sections"] for c in section["containers"]]
    assert len(containers) == 3
    for container in containers:
        assert [e["kind"] for e in container["entries"]] == ["lto-ir"]
        assert container["entries"][0]["arch"] == "sm_80"
    # the build records name what each container holds (the same as the CMake path)
    records = {c["record"]["source"]: c["record"] for c in containers}
    switch = "<handler switch of setuptools_pkg._core>"
    assert set(records) == {KERNEL, "src/handlers.cu", switch}
    assert records[switch]["compiled"] == "side" and records[switch]["handlers"] == []
    assert records[KERNEL]["compiled"] == "side"
    assert records[KERNEL]["kernels"] == ["single_thread_dispatcher"]
    assert records["src/handlers.cu"]["compiled"] == "nvcc"
    assert records["src/handlers.cu"]["handlers"] == ["rpc_increment"]
    for record in records.values():
        assert record["architectures"] == ["80"]
        assert re.fullmatch(r"nvcc \d+\.\d+(\.\d+)?", record["compiler"]), record


@pytest.mark.integration
@pytest.mark.toolchain
def test_link_cli_links_the_kernel_and_handlers_for_sm90(built: Built, tmp_path: Path) -> None:
    cubin = tmp_path / "out.cubin"
    proc = run(
        [
            sys.executable,
            "-m",
            "skbuild_cudaq",
            "link",
            str(built.extension),
            *LINK_ARGS,
            str(cubin),
        ],
        cwd=built.site,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    symbols = elf_symbols(cubin)
    assert symbols.get("single_thread_dispatcher") == "STT_FUNC"
    assert symbols.get("cudaq_realtime_unified_dispatch") == "STT_FUNC"
    assert symbols.get("cudaq_handler_rpc_increment") == "STT_OBJECT"


@pytest.mark.integration
@pytest.mark.toolchain
def test_sdist_carries_the_kernel_source(tmp_path: Path) -> None:
    """The kernel and the project headers it includes (next to it, nested, no MANIFEST.in
    line for them): a wheel builds from the sdist. Before, the sdist lacked such headers
    and the build from it failed in nvcc."""
    project = copy_package(tmp_path)
    (project / "src" / "local_cfg.cuh").write_text('#include "nested/deep.cuh"\n')
    (project / "src" / "nested").mkdir()
    (project / "src" / "nested" / "deep.cuh").write_text("#define SETUPTOOLS_PKG_DEEP 1\n")
    kernel = project / KERNEL
    kernel.write_text('#include "local_cfg.cuh"\n' + kernel.read_text())
    out = tmp_path / "dist"
    proc = run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "-o", str(out), str(project)],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import tarfile

    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
        tf.extractall(tmp_path / "unpacked", filter="data")
    assert {KERNEL, "src/handlers.cu", "include/setuptools_pkg/config.h"} <= names
    assert {"src/local_cfg.cuh", "src/nested/deep.cuh"} <= names, sorted(names)
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    wheel = run([*PIP_WHEEL, "-w", str(tmp_path / "wheels"), str(unpacked)], cwd=tmp_path)
    assert wheel.returncode == 0, (wheel.stdout + wheel.stderr)[-3000:]


def _snapshot(project: Path) -> dict[str, int]:
    files = [*project.glob("build/**/*"), *project.glob("setuptools_pkg/*.so")]
    return {str(p.relative_to(project)): p.stat().st_mtime_ns for p in files if p.is_file()}


@pytest.mark.integration
@pytest.mark.toolchain
def test_build_ext_is_incremental(tmp_path: Path) -> None:
    project = copy_package(tmp_path)
    build_ext = [sys.executable, "setup.py", "build_ext", "--inplace"]
    first = run(build_ext, cwd=project)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "nvcc (LTO-IR dispatch kernel)" in first.stderr
    before = _snapshot(project)
    assert any(k.endswith(".fatbin") for k in before)

    again = run(build_ext, cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nvcc" not in again.stderr
    assert "building 'setuptools_pkg._core' extension" not in again.stdout + again.stderr
    assert _snapshot(project) == before  # nothing was rewritten

    # the kernel changes: its fatbin, the embed object and the module are rebuilt,
    # the handler object is not
    kernel = project / KERNEL
    newer = max(before.values()) + 1  # newer than every output, older than now
    os.utime(kernel, ns=(newer, newer))
    third = run(build_ext, cwd=project)
    assert third.returncode == 0, third.stdout + third.stderr
    after = _snapshot(project)
    changed = {k for k in before if after.get(k) != before[k]}
    assert any(k.endswith(".fatbin") for k in changed)
    assert any(k.endswith("cudaq_embed.o") for k in changed)
    assert any(k.startswith("setuptools_pkg/") and k.endswith(".so") for k in changed)
    assert not any("/objects/handlers-" in k for k in changed)

    fourth = run(build_ext, cwd=project)
    assert fourth.returncode == 0
    assert _snapshot(project) == after


@pytest.mark.integration
def test_project_without_tool_cudaq_builds_untouched(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "plain"\nversion = "0"\n',
        encoding="utf-8",
    )
    (tmp_path / "plain.c").write_text(
        '#include <Python.h>\nstatic struct PyModuleDef d = {PyModuleDef_HEAD_INIT, "plain"};\n'
        "PyMODINIT_FUNC PyInit_plain(void) { return PyModule_Create(&d); }\n",
        encoding="utf-8",
    )
    (tmp_path / "setup.py").write_text(
        "from setuptools import Extension, setup\n"
        "setup(ext_modules=[Extension('plain', ['plain.c'])])\n",
        encoding="utf-8",
    )
    proc = run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    output = proc.stdout + proc.stderr
    assert "build_cudaq_kernels" not in output
    # nothing of ours printed (every line we print starts with the prefix); the paths in the
    # compiler's command lines may well contain "skbuild-cudaq": the README's checkout name
    assert not re.search(r"^skbuild-cudaq:", output, re.MULTILINE), output


# ---------------------------------------------------------------------------
# integration: errors, with the text of the shared core
# ---------------------------------------------------------------------------
@pytest.mark.integration
def test_unknown_extension_name_through_pip(tmp_path: Path) -> None:
    project = copy_package(tmp_path)
    set_table(project, f'"setuptools_pkg._cor" = ["{KERNEL}"]')
    proc = run(
        [*PIP_WHEEL, "-w", str(tmp_path / "dist"), str(project)],
        cwd=tmp_path,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "skbuild-cudaq: error: 1 problem in [tool.cudaq] of pyproject.toml:" in output, output
    assert (
        "tool.cudaq.dispatch-kernels.setuptools_pkg._cor: no extension named "
        "'setuptools_pkg._cor' in this project (extensions: 'setuptools_pkg._core'); "
        "did you mean 'setuptools_pkg._core'?"
    ) in output
    assert "Traceback" not in output


@pytest.mark.integration
@pytest.mark.parametrize(
    ("table", "what"),
    [
        (f'"{EXT}" = ["src/missing_dispatcher.cu"]', "a missing kernel file"),
        (f'"{EXT}" = {{ sources = ["{KERNEL}"], architectures = ["75"] }}', "a bad architecture"),
    ],
)
def test_settings_errors_have_the_shared_text(tmp_path: Path, table: str, what: str) -> None:
    from skbuild_cudaq.settings import load_settings

    project = copy_package(tmp_path)
    set_table(project, table)
    try:
        load_settings(project / "pyproject.toml")
    except SettingsError as exc:
        expected = str(exc)
    else:
        pytest.fail(f"load_settings accepted {what}")
    proc = run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=project)
    assert proc.returncode == 1
    assert f"skbuild-cudaq: error: {expected}\n" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "nvcc (" not in proc.stderr  # reported before anything is compiled


@pytest.mark.integration
def test_nvrtc_compiler_is_refused_not_ignored(tmp_path: Path) -> None:
    """``compiler = "nvrtc"`` is a scikit-build-core backend feature: setuptools compiled with
    nvcc anyway (or failed with "nvcc not found" saying nothing of the setting). Now the key
    is named, with the other problems of the table, before anything is compiled."""
    project = copy_package(tmp_path)
    set_table(project, f'"setuptools_pkg._cor" = ["{KERNEL}"]')
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + '\n[tool.cudaq]\ncompiler = "nvrtc"\n')
    proc = run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "skbuild-cudaq: error: 2 problems in [tool.cudaq] of pyproject.toml:" in proc.stderr
    assert (
        '  - tool.cudaq.compiler: "nvrtc" is not a device compiler of the setuptools front '
        "door, which compiles dispatch kernels and .cu sources with nvcc; expected "
        '"auto" or "nvcc"; use "auto" or "nvcc"'
    ) in proc.stderr, proc.stderr
    assert "tool.cudaq.dispatch-kernels.setuptools_pkg._cor: no extension named" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "nvcc (" not in proc.stderr  # reported before anything is compiled
    # "nvcc" and "auto" are this front door's
    check_for_setuptools([EXT], [EXT], compiler="nvcc")
    check_for_setuptools([EXT], [EXT], compiler="auto")


@pytest.mark.integration
@pytest.mark.parametrize("escape", ["semicolon", "symlink"])
def test_sources_escaping_the_project_are_refused(tmp_path: Path, escape: str) -> None:
    """Item 5 of issue 11 at the setuptools front door: both with the key, before nvcc runs."""
    project = copy_package(tmp_path)
    outside = tmp_path / "outside.cu"
    outside.write_text((project / KERNEL).read_text())
    if escape == "semicolon":
        (project / "src/single_thread_dispatcher.cu;").mkdir()
        (project / "src/single_thread_dispatcher.cu;/x.cu").symlink_to(outside)
        source = f"{KERNEL};/x.cu"
        expected = f'"{source}" contains ;, which CMake, make or nvcc would misread'
    else:
        (project / "src/linked.cu").symlink_to(outside)
        source = "src/linked.cu"
        expected = (
            f'"{source}" is a symbolic link (or lies under one) that resolves outside the '
            f'project directory, to "{outside}"'
        )
    set_table(project, f'"{EXT}" = ["{source}"]')
    proc = run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "skbuild-cudaq: error: 1 problem in [tool.cudaq] of " in proc.stderr
    assert f"""  - tool.cudaq.dispatch-kernels."{EXT}"[0]: {expected}""" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "nvcc (" not in proc.stderr
    # and the sdist carries no link to outside: sdist refuses just the same
    sdist = run([sys.executable, "setup.py", "sdist"], cwd=project)
    assert sdist.returncode == 1, sdist.stdout + sdist.stderr
    assert f"""tool.cudaq.dispatch-kernels."{EXT}"[0]: {expected}""" in sdist.stderr


# ---------------------------------------------------------------------------
# gpu: 10,000 RPCs through the setuptools-built package
# ---------------------------------------------------------------------------
GPU_SCRIPT = textwrap.dedent(
    """
    import random

    import setuptools_pkg._core as core
    from skbuild_cudaq.realtime import (
        Dispatcher, DispatcherConfig, HostRingBridge, LaunchConfig,
        get_device_handler, get_device_kernel, launch_kernel,
    )

    N = 10_000
    SLOT_SIZE = 256
    MAX_PAYLOAD = SLOT_SIZE - 24

    kernel = get_device_kernel(core, "single_thread_dispatcher")
    handler = get_device_handler(core, "rpc_increment")


    class Launcher:
        kernel = kernel  # the kernel's module: what the dispatcher serves

        def __call__(self, args):
            launch_kernel(
                kernel, LaunchConfig(grid=(1, 1, 1), block=(1, 1, 1)), args.stream,
                *args.kernel_args(),
            )


    def expected(payload):
        return bytes((b + 1) % 256 for b in payload)


    rng = random.Random(20240601)
    payloads = [
        bytes(rng.randrange(256) for _ in range(rng.randrange(MAX_PAYLOAD + 1)))
        for _ in range(N - 3)
    ]
    payloads += [b"", bytes(range(256))[:MAX_PAYLOAD], bytes([255]) * MAX_PAYLOAD]

    bridge = HostRingBridge(num_slots=8, slot_size=SLOT_SIZE)
    dispatcher = Dispatcher(
        DispatcherConfig(device=0, num_slots=8, slot_size=SLOT_SIZE), bridge=bridge
    )
    dispatcher.function_table.add_device("rpc_increment", handler)
    dispatcher.set_unified_launch(Launcher())
    dispatcher.start()
    try:
        client = bridge.client()
        status, result = client.call("rpc_increment", payloads[0])
        assert status == 0, status
        assert bytes(result) == expected(payloads[0]), "first call"
        checked = 1
        for start in range(1, N, 64):
            batch = payloads[start : start + 64]
            tickets = client.submit_many(("rpc_increment", p) for p in batch)
            for i, (payload, response) in enumerate(zip(batch, client.collect(tickets))):
                assert response.status == 0, (start + i, response.status)
                got = bytes(response.result)
                assert len(got) == len(payload), (start + i, len(got), len(payload))
                want = expected(payload)
                for j in range(len(want)):
                    assert got[j] == want[j], (start + i, j, got[j], want[j])
                checked += 1
    finally:
        dispatcher.stop()
    assert checked == N, checked
    assert dispatcher.processed == N, dispatcher.processed
    print("RPCS_OK", checked, dispatcher.processed)
    """
)


@pytest.mark.gpu
@pytest.mark.integration
def test_setuptools_package_serves_10000_rpcs_on_the_gpu(built_pip: Built) -> None:
    proc = built_pip.python(GPU_SCRIPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"RPCS_OK {10_000} {10_000}" in proc.stdout


@pytest.mark.integration
@pytest.mark.toolchain
def test_nvjitlink_links_the_embedded_code_for_sm90(built: Built, tmp_path: Path) -> None:
    """Independent of the link CLI: each container plus the device run time, one cubin."""
    nvjitlink = pytest.importorskip("cuda.bindings.nvjitlink")
    from skbuild_cudaq.realtime.link.device_runtime import runtime_dir

    options = ["-arch=sm_90", "-lto"]
    handle = nvjitlink.create(len(options), options)
    try:
        inputs = relfatbin_containers(built.extension)
        inputs += [p.read_bytes() for p in sorted(runtime_dir().glob("*.fatbin"))]
        for i, data in enumerate(inputs):
            nvjitlink.add_data(handle, nvjitlink.InputType.FATBIN, data, len(data), f"input{i}")
        try:
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError:
            log = bytearray(nvjitlink.get_error_log_size(handle))
            nvjitlink.get_error_log(handle, log)
            pytest.fail(log.decode(errors="replace"))
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
    finally:
        nvjitlink.destroy(handle)
    path = tmp_path / "linked.cubin"
    path.write_bytes(bytes(cubin))
    symbols = elf_symbols(path)
    assert symbols.get("single_thread_dispatcher") == "STT_FUNC"
    assert symbols.get("cudaq_realtime_unified_dispatch") == "STT_FUNC"
    assert symbols.get("cudaq_handler_rpc_increment") == "STT_OBJECT"


@pytest.mark.integration
@pytest.mark.toolchain
def test_a_python_handler_file_in_the_setuptools_table(tmp_path: Path) -> None:
    """A .py file of Python handlers (issue 53) in the setuptools table: compiled by numba-cuda
    beside the .cu kernel, embedded with its record naming the handlers."""
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
    from skbuild_cudaq.build._device_info import read_records

    project = copy_package(tmp_path)
    device = PACKAGE.parent / "py_handlers" / "src" / "py_handlers" / "device.py"
    shutil.copy(device, project / "src" / "py_device.py")
    set_table(
        project,
        '"setuptools_pkg._core" = ["src/single_thread_dispatcher.cu", "src/py_device.py"]',
    )
    out = tmp_path / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
    proc = run([*cmd, "-w", str(out), str(project)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheel = next(out.glob("setuptools_pkg-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "site")
    extension = next((tmp_path / "site" / "setuptools_pkg").glob("_core.*.so"))
    records = {r["source"]: r for r in read_records(extension)}
    python = records["src/py_device.py"]
    assert python["handlers"] == ["py_checksum", "py_increment"]
    assert python["compiler"].startswith("numba-cuda ")
    assert "src/single_thread_dispatcher.cu" in records
