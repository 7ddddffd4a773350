"""``python -m skbuild_cudaq inspect``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gpu_kernels.testbins import DeviceBinaries

pytestmark = pytest.mark.toolchain


def _inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "inspect", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_json_lists_sections_containers_entries(bins: DeviceBinaries) -> None:
    proc = _inspect(str(bins.two_sections), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["sections"]) == 2
    for section in doc["sections"]:
        (container,) = section["containers"]
        assert container["offset"] == 0
        (entry,) = container["entries"]
        assert entry["kind"] == "lto-ir"
        assert entry["arch"] == "sm_80"
        assert entry["compressed"] is True
        assert entry["size"] > 0
        assert entry["code_version"] == "1.65"  # nvcc 13.0


def test_text_output(bins: DeviceBinaries) -> None:
    proc = _inspect(str(bins.app))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("container ") == 3
    assert proc.stdout.count("lto-ir  sm_80") == 3


def test_no_device_code_is_one_error_line(bins: DeviceBinaries) -> None:
    proc = _inspect(str(bins.plain))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert "no __nv_relfatbin section" in proc.stderr
