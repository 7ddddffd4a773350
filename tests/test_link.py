"""Linking with nvJitLink (no GPU): archs, symbols, errors, version rule, CLI."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpu_kernels.testbins import DeviceBinaries

from skbuild_cudaq.fatbin import FatbinContainer, FatbinEntry
from skbuild_cudaq.realtime.errors import DeviceCodeError, LinkError, VersionMismatchError
from skbuild_cudaq.realtime.library import cubin_symbols
from skbuild_cudaq.realtime.link import _nvjitlink
from skbuild_cudaq.realtime.link.cache import LinkCache
from skbuild_cudaq.realtime.link.device_code import LinkInput, device_code_of
from skbuild_cudaq.realtime.link.device_runtime import runtime_device_code
from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

NO_CACHE = LinkCache(None)
HOOKS = ("cudaq_dev_enter_kernel", "cudaq_dev_rx_poll", "cudaq_dev_tx_publish")


@pytest.mark.toolchain
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100", "sm_120"])
def test_link_for_arch(bins: DeviceBinaries, arch: str) -> None:
    cubin = link_device_code(bins.app, LinkOptions(arch=arch), cache=NO_CACHE).cubin
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(cubin))
    assert elf["e_machine"] == "EM_CUDA"
    symbols = cubin_symbols(cubin)
    # every dispatch kernel (built-in and custom) is a FUNC symbol
    assert {"cudaq_realtime_unified_dispatch", "single_thread_dispatcher"} <= set(symbols.kernels)
    # handlers from both nvcc -rdc objects are exported (each container was linked)
    assert symbols.handlers == ("echo", "rpc_increment")
    # no hook (nor anything else of ours) is left undefined; only the driver's .nv.* remain
    assert not [u for u in symbols.undefined if not u.startswith(".nv.")]
    assert not set(HOOKS) & set(symbols.undefined)


def _pyelftools_symbols(cubin: bytes) -> list[tuple[str, int, int, int]]:
    import io

    from elftools.elf.elffile import ELFFile
    from elftools.elf.enums import ENUM_ST_INFO_BIND, ENUM_ST_INFO_TYPE, ENUM_ST_SHNDX
    from elftools.elf.sections import SymbolTableSection

    out = []
    for section in ELFFile(io.BytesIO(cubin)).iter_sections():
        if section["sh_type"] != "SHT_SYMTAB" or not isinstance(section, SymbolTableSection):
            continue
        for sym in section.iter_symbols():
            if not sym.name:
                continue
            info, shndx = sym.entry["st_info"], sym.entry["st_shndx"]
            bind = ENUM_ST_INFO_BIND.get(info["bind"], info["bind"])
            kind = ENUM_ST_INFO_TYPE.get(info["type"], info["type"])
            out.append((sym.name, bind, kind, ENUM_ST_SHNDX.get(shndx, shndx)))
    return out


@pytest.mark.toolchain
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_elf_symbols_match_pyelftools(bins: DeviceBinaries, arch: str) -> None:
    """Our small ELF symbol reader (on the first answer's path) against pyelftools."""
    import io

    from skbuild_cudaq._elf import elf_symbols

    cubin = link_device_code(bins.app, LinkOptions(arch=arch), cache=NO_CACHE).cubin
    ours = [(s.name, s.bind, s.kind, s.section) for s in elf_symbols(io.BytesIO(cubin), Path("c"))]
    assert ours == _pyelftools_symbols(cubin)
    assert len(ours) > 10
    assert {"single_thread_dispatcher", "cudaq_handler_echo"} <= {s[0] for s in ours}


@pytest.mark.toolchain
def test_each_container_is_a_separate_input(bins: DeviceBinaries) -> None:
    code = device_code_of(bins.app)
    assert len(code.inputs) == 3
    assert len({i.name for i in code.inputs}) == 3
    runtime = runtime_device_code()
    assert {i.name.split(":")[0] for i in runtime.inputs} == {
        "hook_defaults.fatbin",
        "host_ring_bridge.fatbin",
        "unified_dispatch_kernel.fatbin",
    }


@pytest.mark.toolchain
def test_module_object_and_path_link_the_same(bins: DeviceBinaries) -> None:
    import types

    module = types.ModuleType("fake_ext")
    module.__file__ = str(bins.app)
    assert (
        link_device_code(module, LinkOptions(arch="sm_90"), cache=NO_CACHE).cubin
        == link_device_code(str(bins.app), LinkOptions(arch="sm_90"), cache=NO_CACHE).cubin
    )


@pytest.mark.toolchain
def test_an_in_process_link_names_a_defective_nvjitlink_first(
    bins: DeviceBinaries, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before nvJitLink runs in this process, a release known to crash is named (a crash
    would leave no message); an isolated link names it only if the child crashes."""
    import logging

    seen: list[tuple[int, int]] = []

    def defect(version: tuple[int, int]) -> str:
        seen.append(version)
        return "nvidia-nvjitlink 13.0.88 is known to crash"

    monkeypatch.setattr(_nvjitlink, "known_defect", defect)
    _nvjitlink.warn_known_defect.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="skbuild_cudaq"):
            link_device_code(bins.app, LinkOptions(arch="sm_90", isolated=True), cache=NO_CACHE)
            assert not seen
            link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=NO_CACHE)
    finally:
        _nvjitlink.warn_known_defect.cache_clear()
    assert seen == [_nvjitlink.nvjitlink_version()]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "nvidia-nvjitlink 13.0.88 is known to crash (a crash would end this process)"
    ]


@pytest.mark.toolchain
def test_missing_symbol_is_a_link_error_with_the_log(bins: DeviceBinaries) -> None:
    with pytest.raises(LinkError) as info:
        link_device_code(bins.missing, LinkOptions(arch="sm_90"), cache=NO_CACHE)
    assert info.value.result == "ERROR_PTX_COMPILE"
    assert "Unresolved extern function 'cudaq_test_missing_function'" in info.value.log
    assert "Unresolved extern function" in str(info.value)


@pytest.mark.toolchain
def test_duplicate_symbol_is_a_link_error_with_the_log(bins: DeviceBinaries) -> None:
    with pytest.raises(LinkError) as info:
        link_device_code(bins.duplicate, LinkOptions(arch="sm_90"), cache=NO_CACHE)
    assert info.value.result == "ERROR_NVVM_COMPILE"
    assert "cudaq_dev_rx_poll" in info.value.log
    assert "multiply defined" in str(info.value)


@pytest.mark.toolchain
def test_sm75_is_refused_clearly(bins: DeviceBinaries) -> None:
    """Below the run time's floor no rebuild helps: the message says the floor, not a setting."""
    with pytest.raises(LinkError) as info:
        link_device_code(bins.app, LinkOptions(arch="sm_75"), cache=NO_CACHE)
    text = str(info.value)
    assert text.startswith("cannot link for sm_75: skbuild-cudaq serves GPUs of sm_80 and newer")
    assert "sm_75 is below that floor" in text and "link for sm_80 or newer" in text
    assert "rebuild" not in text and "architectures" not in text and "ARCHITECTURES" not in text


@pytest.mark.toolchain
def test_lto90_code_is_refused_for_sm80(bins: DeviceBinaries) -> None:
    """Speaks pyproject (``architectures``); without a build record the container is named by
    its place in the binary."""
    with pytest.raises(LinkError) as info:
        link_device_code(bins.launch_checks, LinkOptions(arch="sm_80"), cache=NO_CACHE)
    text = str(info.value)
    assert text.startswith(
        "cannot link liblaunch_checks.so for sm_80: container liblaunch_checks.so:"
    ), text
    assert "(no build record names its source) has no code for sm_80 (lto-ir sm_90)" in text
    assert 'Link for sm_90 or newer, or rebuild it for sm_80: add "80" to its architectures' in text
    symbols = cubin_symbols(
        link_device_code(bins.launch_checks, LinkOptions(arch="sm_90"), cache=NO_CACHE).cubin
    )
    assert {"cluster_report", "grid_sync_report"} <= set(symbols.kernels)


def test_invalid_arch_text() -> None:
    from skbuild_cudaq.realtime.link.linker import parse_arch

    assert parse_arch("90") == ("sm_90", 90)
    assert parse_arch(90) == parse_arch("lto_90") == parse_arch("compute_90") == ("sm_90", 90)
    with pytest.raises(LinkError, match="invalid architecture 'gfx90a'"):
        parse_arch("gfx90a")
    # one grammar with [tool.cudaq] architectures (issue 56): a variant is refused by both
    for variant in ("sm_100a", "90a", "sm_120f"):
        with pytest.raises(
            LinkError, match=r"architecture-specific variant.*link for sm_(100|90|120):"
        ):
            parse_arch(variant)
    for bad in (True, "sm_99999", "sm_-90", "sm90"):
        with pytest.raises(LinkError, match="expected sm_XY"):
            parse_arch(bad)  # type: ignore[arg-type]


def test_link_options_are_normalised_on_construction(tmp_path: Path) -> None:
    bridge = tmp_path / "hooks.fatbin"
    options = LinkOptions(arch=90, extra=["-O3"], bridge=str(bridge))
    assert (options.arch, options.extra, options.bridge) == ("sm_90", ("-O3",), (bridge,))
    with pytest.raises(LinkError, match="link for sm_90: that cubin runs on the same GPU"):
        LinkOptions(arch="90a")
    assert LinkOptions(bridge=[bridge, bridge]).bridge_paths == (bridge, bridge)
    assert LinkOptions().bridge_paths is None
    with pytest.raises(LinkError, match="invalid architecture 'gpu9'"):
        LinkOptions(arch="gpu9")


@pytest.mark.toolchain
def test_file_without_device_code(bins: DeviceBinaries) -> None:
    with pytest.raises(DeviceCodeError, match="no __nv_relfatbin"):
        link_device_code(bins.plain, LinkOptions(arch="sm_90"), cache=NO_CACHE)


# --- version rule -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ir", "nvjitlink", "verdict"),
    [
        ((1, 65), (13, 0), None),  # 13.0 IR, nvJitLink 13.0
        ((1, 65), (13, 5), None),  # older minor: fine
        ((1, 67), (13, 5), None),
        ((1, 66), (13, 5), None),  # between 13.0 and 13.5: from <= 13.5
        ((1, 67), (13, 0), "comes from CUDA 13.5, newer than nvJitLink 13.0"),
        ((1, 66), (13, 0), "newer than 13.0"),  # written after 13.0
        ((1, 70), (13, 5), "newer than 13.5"),
        ((1, 65), (12, 9), "comes from CUDA 13.0, newer than nvJitLink 12.9"),
        ((1, 65), (14, 0), "not from CUDA 14"),
        ((1, 66), (13, 2), None),  # unknown: 13.1..13.5; nvJitLink decides
        ((1, 64), (12, 9), None),  # NVRTC 12.9 IR, nvJitLink 12.9
        ((1, 64), (12, 8), "comes from CUDA 12.9, newer than nvJitLink 12.8"),
        ((1, 64), (13, 5), "not from CUDA 13"),  # the rule: same major
        ((1, 63), (12, 9), None),  # an older 12.x: fine
    ],
)
def test_version_rule(ir: tuple[int, int], nvjitlink: tuple[int, int], verdict: str | None) -> None:
    problem = _nvjitlink.version_problem(ir, nvjitlink)
    if verdict is None:
        assert problem is None
    else:
        assert problem is not None
        assert verdict in problem


def _fake_input(code_version: tuple[int, int], kind: int = 8) -> LinkInput:
    entry = FatbinEntry(kind, 80, 16, 64, 8, 0, 8, 0x11, code_version)
    return LinkInput("fake.so:1:0", FatbinContainer(0, 1, 16, 72, (entry,), b""))


@pytest.mark.parametrize(
    ("ir", "nvjitlink", "fix"),
    [
        ((1, 65), (12, 9), "pip install 'skbuild-cudaq[cu13]'"),
        ((1, 64), (13, 0), "pip install 'skbuild-cudaq[cu12]'"),
        ((1, 64), (12, 8), "'nvidia-nvjitlink-cu12>=12.9,<13'"),
        ((1, 67), (13, 0), "'nvidia-nvjitlink>=13.5,<14'"),
    ],
)
def test_version_mismatch_names_the_extra_or_package(
    ir: tuple[int, int], nvjitlink: tuple[int, int], fix: str
) -> None:
    with pytest.raises(VersionMismatchError) as info:
        _nvjitlink.check_versions([("/x/ext.so", [_fake_input(ir)])], nvjitlink)
    text = str(info.value)
    assert fix in text and "\n" not in text  # one line
    if ir[0:2] == (1, 65) and nvjitlink[0] == 12:
        assert 'compiler = "nvrtc"' in text and "nvidia-cuda-nvrtc-cu12" in text


@pytest.fixture
def both_majors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A site-packages holding nvJitLink wheels of CUDA 13 and 12 side by side (what
    ``pip install 'skbuild-cudaq[runtime]'`` then a CUDA 12 project's wheel leaves), nothing
    loaded yet: the search finds CUDA 13's first."""
    site = tmp_path / "site-packages"
    for sub, soname, dist in (
        ("nvidia/cu13/lib", "libnvJitLink.so.13", "nvidia_nvjitlink-13.5.37"),
        ("nvidia/nvjitlink/lib", "libnvJitLink.so.12", "nvidia_nvjitlink_cu12-12.9.86"),
    ):
        (site / sub).mkdir(parents=True)
        (site / sub / soname).write_bytes(b"\x7fELF")
        (site / f"{dist}.dist-info").mkdir()
    monkeypatch.setattr(_nvjitlink, "_site_packages", lambda: [str(site)])
    monkeypatch.setattr(_nvjitlink, "mapped_nvjitlink", list)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    _nvjitlink._found_nvjitlink.cache_clear()
    _nvjitlink._wheel_of.cache_clear()
    yield site
    _nvjitlink._found_nvjitlink.cache_clear()
    _nvjitlink._wheel_of.cache_clear()


def test_each_nvjitlink_library_is_its_own_majors_wheel(both_majors: Path) -> None:
    found = _nvjitlink.installed_nvjitlink()
    assert found is not None and found.package == "nvidia-nvjitlink 13.5.37"
    cu12 = _nvjitlink._wheel_of(both_majors / "nvidia/nvjitlink/lib/libnvJitLink.so.12")
    assert cu12.package == "nvidia-nvjitlink-cu12 12.9.86"


def test_version_mismatch_beside_the_right_major_says_which_to_uninstall(
    both_majors: Path,
) -> None:
    """CUDA 12 LTO-IR, CUDA 12's nvJitLink installed, CUDA 13's found first: installing the
    CUDA 12 stack again would change nothing; removing CUDA 13's nvJitLink does."""
    with pytest.raises(VersionMismatchError) as info:
        _nvjitlink.check_versions([("/x/ext.so", [_fake_input((1, 64))])], (13, 5))
    text = str(info.value)
    assert "nvidia-nvjitlink-cu12 12.9.86 is installed too" in text, text
    assert "finds nvidia-nvjitlink 13.5.37 first" in text
    assert "pip uninstall nvidia-nvjitlink," in text and "\n" not in text


def test_version_check_names_the_packages_to_align() -> None:
    with pytest.raises(VersionMismatchError) as info:
        _nvjitlink.check_versions([("/x/ext.so", [_fake_input((1, 67))])], (13, 0))
    text = str(info.value)
    assert "fake.so:1:0" in text and "/x/ext.so" in text
    assert "nvidia-nvjitlink" in text and "nvidia-cuda-nvcc" in text
    # cubin and PTX entries carry other version schemes: not checked
    _nvjitlink.check_versions([("x", [_fake_input((1, 99), kind=2)])], (13, 0))
    _nvjitlink.check_versions([("x", [_fake_input((1, 65))])], (13, 0))


@pytest.mark.toolchain
def test_too_new_lto_ir_is_refused_up_front(bins: DeviceBinaries, tmp_path: Path) -> None:
    """A binary whose LTO-IR claims a code version newer than this nvJitLink's CUDA."""
    code = device_code_of(bins.app)
    entry = code.inputs[0].container.entries[0]
    newer = dataclasses.replace(entry, code_version=(1, 99))
    container = dataclasses.replace(code.inputs[0].container, entries=(newer,))
    patched = dataclasses.replace(code, inputs=(LinkInput("patched", container), *code.inputs[1:]))
    with pytest.raises(VersionMismatchError, match=r"code version 1\.99") as info:
        link_device_code(patched, LinkOptions(arch="sm_90"), cache=NO_CACHE)
    assert info.value.log == ""  # refused before nvJitLink ran


# --- CLI ------------------------------------------------------------------------------


def _cli(*args: str, env_cache: str = "off") -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ, SKBUILD_CUDAQ_LINK_CACHE=env_cache)
    return subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "link", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


@pytest.mark.toolchain
def test_cli_link_writes_the_cubin(bins: DeviceBinaries, tmp_path: Path) -> None:
    out = tmp_path / "app.cubin"
    proc = _cli(str(bins.app), "--arch", "sm_90", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    expected = link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=NO_CACHE).cubin
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(expected).digest()


@pytest.mark.toolchain
@pytest.mark.parametrize(
    ("which", "words"),
    [
        ("missing", "Unresolved extern function 'cudaq_test_missing_function'"),
        ("duplicate", "multiply defined"),
        ("plain", "no __nv_relfatbin section"),
    ],
)
def test_cli_link_failure(bins: DeviceBinaries, tmp_path: Path, which: str, words: str) -> None:
    out = tmp_path / "x.cubin"
    proc = _cli(str(getattr(bins, which)), "--arch", "sm_90", "-o", str(out))
    assert proc.returncode == 1
    assert words in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.toolchain
def test_cli_link_bad_arch(bins: DeviceBinaries, tmp_path: Path) -> None:
    proc = _cli(str(bins.app), "--arch", "sm_75", "-o", str(tmp_path / "x.cubin"))
    assert proc.returncode == 1
    assert "cannot link for sm_75" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.toolchain
def test_cli_link_without_the_runtime_extra_advises_it(
    bins: DeviceBinaries, tmp_path: Path
) -> None:
    """As if the run-time extra were not installed (no cuda-bindings, no nvJitLink wheel): the
    advice is the extra, which brings both. (With the nvJitLink wheel alone the link works: it
    calls the library through ctypes.)"""
    import os

    code = (
        "import sys; sys.modules['cuda'] = None  # no cuda-bindings in this environment\n"
        "from skbuild_cudaq.realtime.link import _nvjitlink\n"
        "_nvjitlink._found_nvjitlink = lambda: None  # and no nvidia-nvjitlink wheel\n"
        "from skbuild_cudaq.__main__ import main; sys.exit(main(sys.argv[1:]))"
    )
    out = tmp_path / "x.cubin"
    proc = subprocess.run(
        [sys.executable, "-c", code, "link", str(bins.app), "--arch", "sm_90", "-o", str(out)],
        capture_output=True, text=True, check=False,
        env=dict(os.environ, SKBUILD_CUDAQ_LINK_CACHE="off"),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("skbuild-cudaq: error: the link command needs the run-time extra")
    assert proc.stderr.rstrip().endswith('pip install "skbuild-cudaq[runtime]"'), proc.stderr
    assert "nvidia-nvjitlink" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


# --- a container without code for the GPU is left out ------------------------------------


@pytest.mark.toolchain
def test_a_container_without_code_for_the_gpu_is_left_out(
    bins: DeviceBinaries, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As CUDA does per translation unit: the lto_90 container of a module whose other
    containers are lto_80 is left out of its sm_80 link (logged, recorded in the result,
    from the cache too); the rest links. For sm_90 everything links."""
    import logging

    from skbuild_cudaq.realtime.link.linker import LeftOut

    cache = LinkCache(tmp_path / "cache")
    (lto_90,) = [i.name for i in device_code_of(bins.mixed).inputs if i.name.endswith(":1")]
    with caplog.at_level(logging.INFO, logger="skbuild_cudaq.realtime"):
        result = link_device_code(bins.mixed, LinkOptions(arch="sm_80"), cache=cache)
    assert result.left_out == (LeftOut(lto_90, None, "lto-ir sm_90", 90),)
    assert str(result.left_out[0]) == f"container {lto_90} (lto-ir sm_90)"
    assert not result.cache_hit and result.seconds is not None
    symbols = cubin_symbols(result.cubin)
    assert "single_thread_dispatcher" in symbols.kernels and symbols.handlers == ("rpc_increment",)
    assert not {"cluster_report", "grid_sync_report"} & set(symbols.kernels)
    said = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert said == [
        f"left out of the link of libmixed.so for sm_80: container {lto_90} (lto-ir sm_90) "
        "has no code for it; what it defines is unavailable on this GPU"
    ]
    hit = link_device_code(bins.mixed, LinkOptions(arch="sm_80"), cache=cache)
    assert hit.cache_hit and hit.cubin == result.cubin and hit.left_out == result.left_out
    whole = link_device_code(bins.mixed, LinkOptions(arch="sm_90"), cache=cache)
    assert whole.left_out == () and not whole.cache_hit
    # the binary of the GPU test (an H200 leaves out its sm_100-only container)
    newer = link_device_code(bins.newer_only, LinkOptions(arch="sm_90"), cache=cache)
    assert [(item.has, item.lowest) for item in newer.left_out] == [("lto-ir sm_100", 100)]
    assert "cluster_report" not in cubin_symbols(newer.cubin).kernels
    assert {"cluster_report", "single_thread_dispatcher"} <= set(cubin_symbols(whole.cubin).kernels)


@pytest.mark.toolchain
@pytest.mark.parametrize("isolated", [False, True])
def test_an_unresolved_symbol_names_the_containers_left_out(
    bins: DeviceBinaries, isolated: bool
) -> None:
    """The sm_90-only container defines what the sm_80 one calls: for sm_80 it is left out
    and nvJitLink cannot resolve the call; the error says which container was left out."""
    options = LinkOptions(arch="sm_80", isolated=isolated)
    with pytest.raises(LinkError) as info:
        link_device_code(bins.needs_90, options, cache=NO_CACHE)
    error = info.value
    assert error.result == "ERROR_PTX_COMPILE"
    assert "Unresolved extern function 'cudaq_test_missing_function'" in error.log
    assert "'cudaq_test_missing_function' is unresolved and container libneeds_90.so:" in (
        error.message
    )
    assert "(lto-ir sm_90) was left out of the link for sm_80 (no code for it)" in error.message
    assert 'add "80" to that source\'s architectures' in error.message
    assert "or run on a GPU of sm_90 or newer" in error.message
    linked = link_device_code(bins.needs_90, LinkOptions(arch="sm_90"), cache=NO_CACHE)
    assert "calls_missing" in cubin_symbols(linked.cubin).kernels and linked.left_out == ()
    # without containers left out, nvJitLink's error is as it was
    with pytest.raises(LinkError) as plain:
        link_device_code(bins.missing, LinkOptions(arch="sm_80"), cache=NO_CACHE)
    assert "left out" not in str(plain.value)
