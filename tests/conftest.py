"""Shared fixtures. Nothing here touches CUDA at import or collection time."""

from __future__ import annotations

import functools
import importlib
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from _fake_driver import UseDriver
    from gpu_kernels.testbins import DeviceBinaries

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_APP = ROOT / "example_app"
PACKAGES = Path(__file__).resolve().parent / "packages"
EXTENSION = "example_app._core"  # example_app's extension: the handlers and custom kernels


@functools.cache
def _gpu_reason() -> str | None:
    """None if a CUDA GPU is usable, else why not (checked lazily, in a subprocess)."""
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "from cuda.bindings import driver as d;"
                "r=d.cuInit(0)[0];assert r==d.CUresult.CUDA_SUCCESS,r;"
                "r,n=d.cuDeviceGetCount();assert n>0,'no device';print(n)",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot probe CUDA: {exc}"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"no usable CUDA GPU ({tail})"
    return None


#: Test files run in this order of their heaviest tier: those with integration tests, then those
#: with toolchain tests, then the rest; in collection order within each (a stable sort). Under
#: tools/test.sh, xdist hands files to workers in this order (--no-loadscope-reorder: its default,
#: the files with the fewest tests last, ran the one-test demo, the longest file, at the very
#: end, with the other worker idle for minutes).
_HEAVY_FIRST = ("integration", "toolchain")


def _heavy_first(items: list[pytest.Item]) -> None:
    rank: dict[Path, int] = {}
    for item in items:
        tier = next(
            (i for i, name in enumerate(_HEAVY_FIRST) if item.get_closest_marker(name)),
            len(_HEAVY_FIRST),
        )
        rank[item.path] = min(rank.get(item.path, tier), tier)
    items.sort(key=lambda item: rank[item.path])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _heavy_first(items)
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    reason = None
    for item in items:
        if item.get_closest_marker("gpu"):
            reason = _gpu_reason() if reason is None else reason
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _library_logger_restored() -> Iterator[None]:
    """The ``skbuild_cudaq`` logger as each test found it: a test that runs a front door in
    this process (``cli.main``) installs its printing handler, which later tests must not
    inherit (the library itself never prints)."""
    import logging

    logger = logging.getLogger("skbuild_cudaq")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


@pytest.fixture(scope="session")
def nvcc() -> Path:
    from skbuild_cudaq.build._toolchain import find_nvcc
    from skbuild_cudaq.errors import ToolchainError

    try:
        return find_nvcc()
    except ToolchainError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def bins(nvcc: Path, tmp_path_factory: pytest.TempPathFactory) -> DeviceBinaries:
    """The test binaries of ``tests/gpu_kernels`` (built with nvcc once per session)."""
    from gpu_kernels.testbins import build_once

    return build_once(nvcc, tmp_path_factory.mktemp("testbins"))


@pytest.fixture(scope="session")
def core() -> Any:
    """example_app's extension module (``pip install ./example_app``); a skip without it.

    Imported at the first test that asks (never at collection): importing it touches no CUDA.
    """
    try:
        return importlib.import_module(EXTENSION)
    except ImportError as exc:
        pytest.skip(f"{EXTENSION} is not installed (pip install ./example_app): {exc}")


@pytest.fixture
def use_driver(monkeypatch: pytest.MonkeyPatch) -> UseDriver:
    """``use_driver(fake)`` makes ``fake`` the run time's CUDA driver for this test.

    The one seam is ``skbuild_cudaq.realtime._driver.driver``; the module's per-process
    state (``cuInit`` done, retained primary contexts, architectures) starts empty and
    is restored afterwards. ``use_driver(None)`` keeps the real driver, state reset.
    Fakes are in ``tests/_fake_driver.py``.
    """
    from skbuild_cudaq.realtime import _driver

    def install(fake: Any) -> Any:
        if fake is not None:
            monkeypatch.setattr(_driver, "driver", lambda: fake)
        monkeypatch.setattr(_driver, "_initialised", False)
        monkeypatch.setattr(_driver, "_primary", {})
        monkeypatch.setattr(_driver, "_archs", {})
        return fake

    return install


#: The native host handlers of the ``native_handlers`` fixture (C, with Python's headers only
#: for PyGILState_Check: whether the calling thread holds the GIL).
NATIVE_HANDLERS_C = r"""
#include <Python.h>
#include <string.h>
#include <cudaq/realtime/host_handler.h>

static int rpc_increment(const void *args, uint32_t arg_len, void *result, uint32_t max_len,
                         uint32_t *result_len) {
  if (arg_len > max_len) return 1;
  for (uint32_t i = 0; i < arg_len; ++i)
    ((uint8_t *)result)[i] = (uint8_t)(((const uint8_t *)args)[i] + 1);
  *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(rpc_increment);

static int echo(const void *args, uint32_t arg_len, void *result, uint32_t max_len,
                uint32_t *result_len) {
  if (arg_len > max_len) return 1;
  memcpy(result, args, arg_len);
  *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(echo);

/* status: the first argument byte (a status of the application's), as a negative number
 * when the second byte is 1; no result */
static int status_of_first(const void *args, uint32_t arg_len, void *result, uint32_t max_len,
                           uint32_t *result_len) {
  (void)result; (void)max_len;
  *result_len = 0;
  if (arg_len == 0) return 0;
  const uint8_t *a = (const uint8_t *)args;
  return arg_len > 1 && a[1] == 1 ? -(int)a[0] : (int)a[0];
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(status_of_first);

/* claims one byte more than fits */
static int too_long(const void *args, uint32_t arg_len, void *result, uint32_t max_len,
                    uint32_t *result_len) {
  (void)args; (void)arg_len; (void)result;
  *result_len = max_len + 1;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(too_long);

/* writes 16 bytes past max_result_len (and says it wrote max_result_len): the bug the host
 * path's guard after the result region catches (issue 56 item 7) */
static int writes_past(const void *args, uint32_t arg_len, void *result, uint32_t max_len,
                       uint32_t *result_len) {
  (void)args; (void)arg_len;
  memset(result, 0x5A, (size_t)max_len + 16);
  *result_len = max_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(writes_past);

/* status: whether the calling thread holds the GIL */
static int holds_gil(const void *args, uint32_t arg_len, void *result, uint32_t max_len,
                     uint32_t *result_len) {
  (void)args; (void)arg_len; (void)result; (void)max_len;
  *result_len = 0;
  return PyGILState_Check();
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(holds_gil);

/* importable as a Python module too: the test server's --module=cudaq_test_handlers */
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cudaq_test_handlers", NULL, -1,
                                    NULL, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit_cudaq_test_handlers(void) { return PyModule_Create(&module); }
"""


@pytest.fixture(scope="session")
def native_handlers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared library exporting native host handlers (``NATIVE_HANDLERS_C``), built with
    the C compiler like an extension module (hidden visibility, --gc-sections, stripped),
    and importable as the module ``cudaq_test_handlers`` from its directory; a skip without
    a C compiler."""
    import shutil
    import sysconfig

    import skbuild_cudaq

    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH")
    work = tmp_path_factory.mktemp("native_handlers")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    src, lib = work / "handlers.c", work / f"cudaq_test_handlers{suffix}"
    src.write_text(NATIVE_HANDLERS_C)
    subprocess.run(
        [cc, "-std=c11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-ffunction-sections",
         "-fdata-sections", "-Wl,--gc-sections", "-Wl,-s", f"-I{skbuild_cudaq.include_dir()}",
         f"-I{sysconfig.get_paths()['include']}", str(src), "-o", str(lib)],
        check=True,
    )  # fmt: skip
    return lib
