"""nvJitLink in a child process (the CLI's default): same cubin, same errors, a crash contained.

And the issue's crashes (a fatbin entry whose compressed size exceeds its code, or whose options
offset lies outside its header) are now refused by the reader before nvJitLink sees them.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_kernels.testbins import DeviceBinaries

from skbuild_cudaq.fatbin import read_fatbin_file, read_relfatbin_sections
from skbuild_cudaq.realtime.errors import LinkError
from skbuild_cudaq.realtime.link._child import link_in_child
from skbuild_cudaq.realtime.link.cache import LinkCache
from skbuild_cudaq.realtime.link.device_code import DeviceCode, LinkInput
from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

pytestmark = pytest.mark.toolchain
NO_CACHE = LinkCache(None)
OPTIONS = ["-arch=sm_90", "-lto"]
ENTRY = 16  # the first entry header of a container


def _crashing(bins: DeviceBinaries) -> bytes:
    """The dispatcher's container with a compressed size past its code: nvJitLink segfaults."""
    data = bytearray(read_fatbin_file(bins.dispatcher_fatbin)[0].data)
    struct.pack_into("<I", data, ENTRY + 16, 0xFFFFFF)
    return bytes(data)


def test_isolated_link_gives_the_same_cubin(bins: DeviceBinaries) -> None:
    inside = link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=NO_CACHE).cubin
    assert (
        link_device_code(bins.app, LinkOptions(arch="sm_90", isolated=True), cache=NO_CACHE).cubin
        == inside
    )


def test_link_errors_cross_the_process_boundary(bins: DeviceBinaries) -> None:
    with pytest.raises(LinkError) as info:
        link_device_code(bins.missing, LinkOptions(arch="sm_90", isolated=True), cache=NO_CACHE)
    assert type(info.value) is LinkError
    assert info.value.result == "ERROR_PTX_COMPILE"
    assert "Unresolved extern function 'cudaq_test_missing_function'" in info.value.log


def test_a_crash_of_nvjitlink_is_one_error_line(bins: DeviceBinaries, tmp_path: Path) -> None:
    bad = _crashing(bins)
    # in-process, this input kills the process: the reason the CLI links in a child
    probe = tmp_path / "bad.fatbin"
    probe.write_bytes(bad)
    code = (
        "import sys; from skbuild_cudaq.realtime.link import _nvjitlink\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "_nvjitlink.link_blobs([('bad', data)], ['-arch=sm_90', '-lto'])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(probe)], capture_output=True, check=False, timeout=300
    )
    assert proc.returncode < 0, "nvJitLink no longer crashes on this input: pick another"
    with pytest.raises(LinkError) as info:
        link_in_child([("bad", bad)], OPTIONS, "bad.fatbin for sm_90")
    text = str(info.value)
    assert text.startswith("nvJitLink crashed (SIG")
    assert "while linking bad.fatbin for sm_90" in text
    assert "\n" not in text
    assert info.value.result == "CRASHED"
    # the same through the link API: a DeviceCode the reader never saw
    container = read_fatbin_file(bins.dispatcher_fatbin)[0]
    forged = DeviceCode(probe, (LinkInput("bad", _replace_data(container, bad)),))
    with pytest.raises(LinkError, match=r"^nvJitLink crashed \(SIG"):
        link_device_code(forged, LinkOptions(arch="sm_90", isolated=True), cache=NO_CACHE)


def _replace_data(container: object, data: bytes) -> object:
    import dataclasses

    return dataclasses.replace(container, data=data)  # type: ignore[type-var]


def test_a_link_past_its_timeout_is_killed(bins: DeviceBinaries) -> None:
    data = read_fatbin_file(bins.dispatcher_fatbin)[0].data
    with pytest.raises(LinkError, match=r"did not finish within 0\.01 s while linking x"):
        link_in_child([("x", data)], OPTIONS, "x", timeout=0.01)


def test_the_child_memory_limit(bins: DeviceBinaries) -> None:
    data = read_fatbin_file(bins.dispatcher_fatbin)[0].data
    # a normal link fits well within the smallest limit LinkOptions accepts
    options = LinkOptions(arch="sm_90", isolated=True, memory_limit=256 << 20)
    inside = link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=NO_CACHE).cubin
    assert link_device_code(bins.app, options, cache=NO_CACHE).cubin == inside
    # too little to even load nvJitLink: a clean error, not a dead caller
    with pytest.raises((LinkError, ImportError)):
        link_in_child([("x", data)], OPTIONS, "x", memory_limit=48 << 20)
    for bad in (0, 1 << 20, 1 << 62):
        with pytest.raises(LinkError, match="invalid link memory limit"):
            LinkOptions(isolated=True, memory_limit=bad)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SKBUILD_CUDAQ_LINK_CACHE="off")
    return subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "link", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def test_cli_in_process_and_timeout_options(bins: DeviceBinaries, tmp_path: Path) -> None:
    out = tmp_path / "in.cubin"
    proc = _cli(str(bins.app), "--arch", "sm_90", "-o", str(out), "--in-process")
    assert proc.returncode == 0, proc.stderr
    assert (
        out.read_bytes()
        == link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=NO_CACHE).cubin
    )
    for bad in ("0", "-1", "inf", "nan", "1e300"):  # a usage error, in the option's terms
        proc = _cli(str(bins.app), "--arch", "sm_90", "-o", str(out), "--timeout", bad)
        assert proc.returncode == 2
        assert "argument --timeout: expected a positive number of seconds" in proc.stderr
        assert proc.stderr.rstrip().endswith(f"got {bad!r}")


def test_cli_links_in_a_child_by_default(bins: DeviceBinaries, tmp_path: Path) -> None:
    """``--timeout`` bounds the child; that it fires shows the default link is in a child."""
    out = tmp_path / "x.cubin"
    proc = _cli(str(bins.app), "--arch", "sm_90", "-o", str(out), "--timeout", "0.001")
    assert proc.returncode == 1
    assert "nvJitLink did not finish within 0.001 s while linking" in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(
    "case",
    [
        (16, 0xFFFFFF, "compressed size 16777215 outside"),
        (20, 0x7FFFFFF0, "options record at 2147483632 outside"),
    ],
    ids=["compressed-size", "options-offset"],
)
@pytest.mark.parametrize("mode", [(), ("--in-process",)], ids=["child", "in-process"])
def test_the_issue_crashes_are_refused_by_the_reader(
    bins: DeviceBinaries, tmp_path: Path, case: tuple[int, int, str], mode: tuple[str, ...]
) -> None:
    field, value, words = case
    data = bytearray(bins.app.read_bytes())
    section = read_relfatbin_sections(bins.app)[0]
    entry = section.file_offset + section.containers[1].offset + ENTRY
    struct.pack_into("<I", data, entry + field, value)
    bad = tmp_path / "libbad.so"
    bad.write_bytes(bytes(data))
    proc = _cli(str(bad), "--arch", "sm_90", "-o", str(tmp_path / "x.cubin"), *mode)
    assert proc.returncode == 1, proc.stderr
    assert words in proc.stderr
    assert proc.stderr.startswith("skbuild-cudaq: error: ")
    assert proc.stderr.count("\n") == 1
