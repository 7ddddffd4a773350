"""nvJitLink called through ctypes (``_nvjitlink.CLibrary``), checked against ``cuda.bindings``.

A cold link calls the C functions of the libnvJitLink file that the cache key describes, so that
the start-up's link worker does not import ``cuda.bindings.nvjitlink`` (and ``cuda.pathfinder``
with it). Both ways must give the same cubin, the same versions and the same error names.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from gpu_kernels.testbins import DeviceBinaries

from skbuild_cudaq.realtime.errors import LinkError
from skbuild_cudaq.realtime.link import _nvjitlink
from skbuild_cudaq.realtime.link.device_code import device_code_of
from skbuild_cudaq.realtime.link.device_runtime import runtime_device_code

pytestmark = pytest.mark.toolchain


@pytest.fixture(scope="module")
def bindings() -> object:
    nvjitlink = pytest.importorskip("cuda.bindings.nvjitlink")
    if _nvjitlink.c_library() is None:
        pytest.skip("libnvJitLink is found only by the system loader here")
    return nvjitlink


def _blobs(bins: DeviceBinaries) -> list[tuple[str, bytes]]:
    inputs = runtime_device_code().inputs + device_code_of(bins.app).inputs
    return [(i.name, i.container.data) for i in inputs]


def test_the_c_library_is_the_one_cuda_bindings_loads(bindings: object) -> None:
    lib = _nvjitlink.c_library()
    assert lib is not None
    assert lib.version == tuple(int(v) for v in bindings.version())  # type: ignore[attr-defined]
    assert _nvjitlink.mapped_nvjitlink() == [lib.path]  # one file mapped, whoever loaded it


def test_result_names_and_input_type_match_cuda_bindings(bindings: object) -> None:
    names = {int(r): r.name for r in bindings.Result}  # type: ignore[attr-defined]
    assert {i: names[i] for i in range(len(_nvjitlink.RESULT_NAMES))} == dict(
        enumerate(_nvjitlink.RESULT_NAMES)
    )
    assert int(bindings.InputType.FATBIN) == _nvjitlink.INPUT_FATBIN  # type: ignore[attr-defined]
    assert _nvjitlink.result_name(999) == "status 999"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_both_ways_link_the_same_cubin(bins: DeviceBinaries, bindings: object, arch: str) -> None:
    blobs, opts = _blobs(bins), [f"-arch={arch}", "-lto"]
    assert _nvjitlink.link_blobs(blobs, opts) == _nvjitlink._link_with_bindings(blobs, opts)


@pytest.mark.parametrize(
    ("options", "result", "stage"),
    [
        (["-arch=sm_90", "-lto", "-no-such-option"], "ERROR_UNRECOGNIZED_OPTION", "creating"),
        (["-lto"], "ERROR_MISSING_ARCH", "creating"),
    ],
)
def test_errors_are_named_as_cuda_bindings_names_them(
    bins: DeviceBinaries, bindings: object, options: list[str], result: str, stage: str
) -> None:
    blobs = _blobs(bins)
    with pytest.raises(LinkError) as ours:
        _nvjitlink.link_blobs(blobs, options, sources="the test")
    assert ours.value.result == result
    assert f"nvJitLink failed while {stage}" in str(ours.value)
    assert "the test; options" in str(ours.value)


def test_a_bad_input_is_a_link_error_with_the_log(bins: DeviceBinaries, bindings: object) -> None:
    blobs = [*_blobs(bins), ("garbage.fatbin", b"\x50\xed\x55\xba" + bytes(60))]
    with pytest.raises(LinkError) as ours:
        _nvjitlink.link_blobs(blobs, ["-arch=sm_90", "-lto"])
    with pytest.raises(LinkError) as theirs:
        _nvjitlink._link_with_bindings(blobs, ["-arch=sm_90", "-lto"])
    assert ours.value.result == theirs.value.result != "SUCCESS"
    assert "adding garbage.fatbin" in str(ours.value) or "linking" in str(ours.value)


def test_a_cold_link_imports_neither_cuda_bindings_nvjitlink_nor_pathfinder(
    bins: DeviceBinaries, bindings: object
) -> None:
    """The start-up's link worker must not wait for cuda-pathfinder's import (~80 ms)."""
    code = textwrap.dedent(
        f"""
        import sys
        from skbuild_cudaq.realtime.link.cache import LinkCache
        from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code
        options = LinkOptions(arch="sm_90")
        cubin = link_device_code({str(bins.app)!r}, options, cache=LinkCache(None)).cubin
        assert cubin[:4] == b"\\x7fELF", cubin[:4]
        print(sorted(m for m in sys.modules if m.startswith(("cuda.bindings", "cuda.pathfinder"))))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]", proc.stdout
