"""The device-code experiments kept as patches (``bench/variants/*.patch``) and the script that
measures one against the shipped code (``tools/variant-ab.sh``), without a GPU: each patch still
applies to this tree, so that an experiment of ``bench/results/history/README.md`` can be run
again as it was; the script refuses to run without a patch, before it touches anything."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATCHES = sorted((ROOT / "bench" / "variants").glob("*.patch"))
SCRIPT = ROOT / "tools" / "variant-ab.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)


def test_there_are_variants_and_each_is_described_in_the_history() -> None:
    history = (ROOT / "bench" / "results" / "history" / "README.md").read_text(encoding="utf-8")
    assert PATCHES
    for patch in PATCHES:
        assert f"bench/variants/{patch.name}" in history, f"{patch.name} is not described"


@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_each_variant_applies_to_this_tree(patch: Path) -> None:
    done = subprocess.run(
        ["git", "apply", "--check", str(patch)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_ab_script_parses_and_refuses_to_run_without_a_patch(tmp_path: Path) -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], check=False).returncode == 0
    for args in ([], [str(tmp_path / "missing.patch")]):
        done = subprocess.run(
            ["bash", str(SCRIPT), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2 and "usage: bash tools/variant-ab.sh PATCH" in done.stderr


def _fake_python(tmp_path: Path, fail_when_patched: bool, tests_fail: bool = False) -> Path:
    """A stand-in for python3 that records the bridge's state at each call (and fails, if asked,
    once the patch is applied, or as the GPU tests): the script's passes without a GPU."""
    log = tmp_path / "calls.log"
    fake = tmp_path / "fake-python"
    fail = "exit 3" if fail_when_patched else ":"
    pytest_fails = 'case "$*" in "-m pytest "*) exit 5;; esac\n' if tests_fail else ""
    fake.write_text(
        "#!/usr/bin/env bash\n"
        # the patch's line (the shipped bridge prefetches its staging area, not the slot)
        "if grep -qF '\"l\"(slot)' skbuild_cudaq/device/host_ring_bridge.cu; then\n"
        f"  echo patched >> {log}; {fail}\n"
        f"else echo base >> {log}; fi\n" + pytest_fails,
        encoding="utf-8",
    )
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize(
    ("fail", "tests"),
    [(False, "0"), (False, "1"), (False, "fail"), (True, "0")],
    ids=["completes", "completes-with-tests", "tests-fail", "fails-while-patched"],
)
def test_the_ab_script_alternates_and_always_restores_the_tree(
    tmp_path: Path, fail: bool, tests: str
) -> None:
    """Passes alternate base / patched, and the tree is as it was afterwards, also when a pass
    fails while the patch is applied (in a clone: the script edits its own checkout)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    # the script and the patch as in this tree (committed in the clone: a clean status to test)
    for rel in ("tools/variant-ab.sh", "bench/variants/bridge-slot-prefetch.patch"):
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, clone / rel)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "add", "-A"], cwd=clone, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "t"], cwd=clone, check=True)
    fake = _fake_python(tmp_path, fail, tests_fail=tests == "fail")
    patch = clone / "bench" / "variants" / "bridge-slot-prefetch.patch"
    done = subprocess.run(
        ["bash", "tools/variant-ab.sh", str(patch)],
        check=False,
        cwd=clone,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHON": str(fake),
            "PASSES": "2",
            "TESTS": "1" if tests == "fail" else tests,
            "OUT": str(tmp_path / "o"),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    seen = (tmp_path / "calls.log").read_text(encoding="utf-8").split()
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True, check=True
    )
    assert status.stdout == "", status.stdout  # restored
    if fail:
        assert done.returncode != 0 and seen[-1] == "patched"
    else:
        # the GPU tests' status is the script's (after the summary and the reinstall)
        assert done.returncode == (5 if tests == "fail" else 0), done.stderr
        # each pass: two installs and the benchmark; then the summary (base again)
        per_pass = 3
        labels = [seen[i * per_pass] for i in range(4)]
        assert labels == ["base", "patched", "base", "patched"]
        rest = seen[4 * per_pass :]
        # with TESTS=1: an editable install of both and pytest, patched; then the shipped
        # code installed again (two installs) and the summary
        assert rest == ["patched"] * (0 if tests == "0" else 3) + ["base"] * 3
