"""nvJitLink releases known to crash on valid input: named before an in-process link,
in a contained crash's message and in a ptxas internal compiler error's.

nvJitLink 13.0.39 and 13.0.88 die by SIGSEGV inside their ptxas, and 13.1.80 stops with
``(C7907) Internal compiler error``, linking a cooperative-grid kernel with handlers and a
bridge of one's own for sm_90 (example_app's sources and tests/gpu_kernels/mailbox_bridge.cu);
13.1.115 and 13.5 link it. The floor of the ``runtime``/``cu13`` extras is that release.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from skbuild_cudaq.realtime.link import _child as _link_child
from skbuild_cudaq.realtime.link import _nvjitlink

ROOT = Path(__file__).resolve().parent.parent
ICE_LOG = "ptxas fatal   : (C7907) Internal compiler error.\nptxas fatal   : Ptx assembly aborted"


def _installed(monkeypatch: pytest.MonkeyPatch, version: str | None) -> None:
    info = None
    if version is not None:
        info = _nvjitlink.NvJitLinkInfo(Path("/x/libnvJitLink.so.13"), "nvidia-nvjitlink", version)
    monkeypatch.setattr(_nvjitlink, "installed_nvjitlink", lambda: info)


@pytest.mark.parametrize(
    ("wheel", "library", "named"),
    [
        ("13.0.39", (13, 0), "nvidia-nvjitlink 13.0.39"),
        ("13.0.88", (13, 0), "nvidia-nvjitlink 13.0.88"),
        ("13.1.80", (13, 1), "nvidia-nvjitlink 13.1.80"),
        (None, (13, 0), "nvJitLink 13.0"),  # no wheel (conda, a toolkit): the library's minor
    ],
)
def test_releases_known_to_crash_are_named_with_the_release_to_install(
    monkeypatch: pytest.MonkeyPatch, wheel: str | None, library: tuple[int, int], named: str
) -> None:
    _installed(monkeypatch, wheel)
    text = _nvjitlink.known_defect(library)
    assert text is not None
    assert text.startswith(f"{named} is known to crash (SIGSEGV in its ptxas)")
    assert text.endswith("pip install -U 'nvidia-nvjitlink>=13.1.115,<14'")


@pytest.mark.parametrize(
    ("wheel", "library"),
    [("13.1.115", (13, 1)), ("13.5.37", (13, 5)), (None, (13, 1)), ("12.9.86", (12, 9))],
)
def test_releases_not_known_to_crash_are_not_flagged(
    monkeypatch: pytest.MonkeyPatch, wheel: str | None, library: tuple[int, int]
) -> None:
    _installed(monkeypatch, wheel)
    assert _nvjitlink.known_defect(library) is None


def test_a_wheel_version_that_disagrees_with_the_library_is_not_believed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a stale dist-info beside another library: the library's own version decides
    _installed(monkeypatch, "13.0.88")
    assert _nvjitlink.known_defect((13, 5)) is None
    _installed(monkeypatch, "13.5.37")
    text = _nvjitlink.known_defect((13, 0))
    assert text is not None and text.startswith("nvJitLink 13.0 is known to crash")


def test_an_in_process_link_with_a_defective_release_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _installed(monkeypatch, "13.0.88")
    _nvjitlink.warn_known_defect.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="skbuild_cudaq"):
            _nvjitlink.warn_known_defect((13, 0))
            _nvjitlink.warn_known_defect((13, 0))
    finally:
        _nvjitlink.warn_known_defect.cache_clear()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].getMessage().endswith("(a crash would end this process)")
    assert "nvidia-nvjitlink 13.0.88 is known to crash" in warnings[0].getMessage()


@pytest.mark.parametrize(
    ("wheel", "library", "advice"),
    [
        ("13.1.80", (13, 1), "nvidia-nvjitlink>=13.1.115,<14"),
        ("13.5.37", (13, 5), "a newer nvJitLink may link it"),
    ],
)
def test_a_ptxas_internal_compiler_error_is_called_an_nvjitlink_defect(
    monkeypatch: pytest.MonkeyPatch, wheel: str, library: tuple[int, int], advice: str
) -> None:
    _installed(monkeypatch, wheel)
    monkeypatch.setattr(_nvjitlink, "nvjitlink_version", lambda: library)
    error = _nvjitlink._link_error("completing", "m.so + run time for sm_90", ["-lto"], 4, ICE_LOG)
    text = str(error)
    assert "ptxas inside nvJitLink" in text
    assert "a defect of nvJitLink, not of the code" in text
    assert advice in text
    assert error.result == "ERROR_PTX_COMPILE"


def test_another_ptx_compile_error_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_nvjitlink, "nvjitlink_version", pytest.fail)  # not even asked
    log = "ptxas fatal   : Unresolved extern function 'f'"
    text = str(_nvjitlink._link_error("completing", "m.so", ["-lto"], 4, log))
    assert "defect" not in text


def test_a_crashed_child_names_the_defective_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that dies by SIGSEGV (here: one that kills itself) with nvJitLink 13.0.88."""
    _installed(monkeypatch, "13.0.88")
    monkeypatch.setattr(_nvjitlink, "nvjitlink_version", lambda: (13, 0))
    monkeypatch.setattr(
        _link_child, "_CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)  # {root}"
    )
    with pytest.raises(_link_child.LinkError) as info:
        _link_child.link_in_child([("m", b"\0" * 16)], ["-arch=sm_90"], "m.so for sm_90")
    text = str(info.value)
    assert text.startswith("nvJitLink crashed (SIGSEGV) while linking m.so for sm_90")
    assert text.endswith("pip install -U 'nvidia-nvjitlink>=13.1.115,<14' [CRASHED]")
    assert info.value.result == "CRASHED"


def test_the_cu13_extras_require_the_first_release_known_not_to_crash() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    release = ".".join(map(str, _nvjitlink.FIXED_RELEASES[13]))
    for extra in ("runtime", "cu13"):
        assert f"nvidia-nvjitlink>={release},<14" in extras[extra]
