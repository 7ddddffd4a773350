"""What differs between CUDA majors lives in one table (``skbuild_cudaq/cmake/cuda-majors.txt``),
read by Python (``skbuild_cudaq._cuda_majors``) and CMake alike; nothing else names a major's
wheels or the folders they install into."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skbuild_cudaq._compat import tomllib
from skbuild_cudaq._cuda_majors import MAJORS_FILE, cuda_major, cuda_majors, default_major
from skbuild_cudaq._paths import cmake_dir

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "skbuild_cudaq"

#: What only the table may spell: a major's library folders inside site-packages, a
#: ``-cuNN`` wheel name, a versioned soname.
_BRACKET_COMMENT = re.compile(r"#\[(=*)\[.*?\]\1\]", re.S)
_MAJOR_SPECIFIC = re.compile(r"nvidia/(cu\d+|cuda_\w+|nvjitlink)\b|\b[\w-]+-cu1\d\b|\.so\.1\d\b")


def test_the_table_lists_the_default_major_with_every_fact() -> None:
    majors = [m.major for m in cuda_majors()]
    assert majors == sorted(majors, reverse=True) and default_major() in majors
    for facts in cuda_majors():
        assert facts.extras and facts.nvcc_wheels and facts.nvrtc_libraries, facts
        assert facts.include_dirs and facts.nvjitlink_dirs and facts.device_runtime, facts
        assert (
            facts.pinned(facts.nvrtc_wheel) == f"{facts.nvrtc_wheel}=={facts.major}.{facts.minor}.*"
        )
    assert cuda_major(99) is None


def _extras() -> dict[str, list[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras: dict[str, list[str]] = data["project"]["optional-dependencies"]
    extras["build-system"] = data["build-system"]["requires"]
    return extras


def test_pyproject_asks_for_what_the_table_says() -> None:
    """pyproject.toml cannot read the table: its extras and build requirements are checked
    against it (the run time's extras name the major's nvJitLink and runtime wheels, from the
    oldest fixed release; our own build pins each major's NVRTC to the table's minor)."""
    extras = _extras()
    for facts in cuda_majors():
        for extra in facts.extras:
            text = " ".join(extras[extra])
            assert re.search(rf"\b{re.escape(facts.nvjitlink_wheel)}>=", text), extra
            assert re.search(rf"\b{re.escape(facts.runtime_wheel)}>=", text), extra
            if facts.nvjitlink_fixed:
                fixed = ".".join(map(str, facts.nvjitlink_fixed))
                assert f"{facts.nvjitlink_wheel}>={fixed}," in text, extra
        pins = [r for r in extras["build-system"] if r.startswith(f"{facts.nvrtc_wheel}==")]
        assert [p.split(";")[0].strip() for p in pins] == [facts.pinned(facts.nvrtc_wheel)]


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """String constants of a Python file that are code, not docstrings or comments."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_only_the_table_names_a_majors_wheels_and_folders() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += [
            f"{path.relative_to(ROOT)}:{line}: {text!r}"
            for line, text in _code_strings(path)
            if _MAJOR_SPECIFIC.search(text)
        ]
    for path in sorted(PACKAGE.rglob("*.cmake")):
        # the reST docs in bracket comments may name wheels; code may not
        text = _BRACKET_COMMENT.sub(
            lambda m: "\n" * m.group(0).count("\n"), path.read_text(encoding="utf-8")
        )
        for line, code in enumerate(text.splitlines(), 1):
            if _MAJOR_SPECIFIC.search(code.split("#", 1)[0]):
                found.append(f"{path.relative_to(ROOT)}:{line}: {code.strip()}")
    assert found == []


def test_the_check_sees_a_name_written_in_code(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text('"""nvidia/cu13/lib in a docstring is fine."""\nX = "nvidia/cu13/lib"\n')
    assert [t for _, t in _code_strings(sample) if _MAJOR_SPECIFIC.search(t)] == ["nvidia/cu13/lib"]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake on PATH")
def test_cmake_reads_the_same_table(tmp_path: Path) -> None:
    script = tmp_path / "majors.cmake"
    script.write_text(
        f'include("{(cmake_dir() / "skbuild_cudaqConfig.cmake").as_posix()}")\n'
        "get_property(majors GLOBAL PROPERTY _SKBUILD_CUDAQ_CUDA_MAJORS)\n"
        "foreach(m IN LISTS majors)\n"
        "  get_property(w GLOBAL PROPERTY _SKBUILD_CUDAQ_CUDA_${m}_nvrtc-wheel)\n"
        '  message("${m} ${w}")\n'
        "endforeach()\n"
    )
    out = subprocess.run(
        ["cmake", "-P", str(script)], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stderr.split() == [w for m in cuda_majors() for w in (str(m.major), m.nvrtc_wheel)]
    assert (cmake_dir() / MAJORS_FILE).is_file()


def test_a_new_major_is_one_entry_in_the_table(tmp_path: Path) -> None:
    """A table with a CUDA 14 entry: the run time's searches and advice follow, no code edit."""
    table = (cmake_dir() / MAJORS_FILE).read_text(encoding="utf-8")
    extra = "\n".join(
        f"14 {line.split(' ', 2)[1]} {line.split(' ', 2)[2].replace('13', '14')}"
        for line in table.splitlines()
        if line.startswith("13 ")
    )
    code = (
        "import sys, pathlib; from skbuild_cudaq import _cuda_majors as t\n"
        f"t.cmake_dir = lambda: pathlib.Path({str(tmp_path)!r})\n"
        "from skbuild_cudaq.build import _requires, _toolchain\n"
        "from skbuild_cudaq.realtime.link import _nvjitlink\n"
        "print(_requires.NVRTC_REQUIREMENTS[14][0], _toolchain._WHEELS[0], _nvjitlink._SONAMES[0])"
    )
    (tmp_path / MAJORS_FILE).write_text(table + "\n" + extra + "\n", encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == [
        "nvidia-cuda-nvrtc==14.0.*", "nvidia-cuda-nvcc", "libnvJitLink.so.14",
    ]  # fmt: skip
