"""``[tool.cudaq]`` settings: good tables, and every malformed one with its exact message."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skbuild_cudaq.errors import CudaqError, SettingsError
from skbuild_cudaq.settings import (
    DEFAULT_ARCHITECTURES,
    CudaqSettings,
    DispatchKernelSettings,
    load_settings,
    parse_settings,
)

HEAD = '[project]\nname = "demo"\nversion = "0.1"\n\n'


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory with a few kernel sources and other files."""
    root = tmp_path / "proj"
    for name in (
        "src/my_dispatcher.cu",
        "src/other.cu",
        "src/kernel.cpp",
        "src/my_dispatcher.cpp",
        "src/k.cuh",
        "kernels/cluster_dispatcher.cu",
    ):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("// test source\n")
    (root / "folder.cu").mkdir()
    return root


def write(project: Path, body: str) -> Path:
    pyproject = project / "pyproject.toml"
    pyproject.write_text(HEAD + textwrap.dedent(body))
    return pyproject


def problems_of(project: Path, body: str) -> list[str]:
    pyproject = write(project, body)
    with pytest.raises(SettingsError) as info:
        load_settings(pyproject)
    return [str(p) for p in info.value.problems]


DK = "tool.cudaq.dispatch-kernels"
ACCEPTED_ENTRY = (
    "an array of .cu paths relative to the project directory or a table "
    "{ sources = [...], architectures = [...] }"
)
ACCEPTED_SOURCE = "a .cu path relative to the project directory"
ACCEPTED_SOURCES = "an array of .cu paths relative to the project directory"
ACCEPTED_ARCH = 'an architecture >= 80 such as "80", "90" or 100'
ACCEPTED_ARCHS = 'an array of architectures >= 80 such as "80", "90" or 100'
ACCEPTED_TARGET = "a CMake target or setuptools extension name such as _core or pkg._core"
IN_PROJECT = "move the file into the project: sdists and wheels are built from it alone"


def arch_body(architectures: str) -> str:
    """A long-form entry with good sources and the given architectures (TOML text)."""
    return f'[{DK}]\n_core = {{ sources = ["src/other.cu"], architectures = {architectures} }}\n'


# (id, [tool.cudaq...] TOML, exact problems; "{project}" is the resolved project directory)
MALFORMED: list[tuple[str, str, list[str]]] = [
    (
        "misspelled-table-singular",
        '[tool.cudaq.dispatch-kernel]\n_core = ["src/my_dispatcher.cu"]\n',
        [
            'tool.cudaq.dispatch-kernel: unknown key "dispatch-kernel"; expected one of: '
            "dispatch-kernels, compiler; did you mean dispatch-kernels?"
        ],
    ),
    (
        "misspelled-table-underscore",
        '[tool.cudaq.dispatch_kernels]\n_core = ["src/my_dispatcher.cu"]\n',
        [
            'tool.cudaq.dispatch_kernels: unknown key "dispatch_kernels"; expected one of: '
            "dispatch-kernels, compiler; did you mean dispatch-kernels?"
        ],
    ),
    (
        "compiler-misspelled",
        '[tool.cudaq]\ncompiler = "nvrct"\n',
        [
            'tool.cudaq.compiler: "nvrct" is not a device compiler; expected one of "auto", '
            '"nvcc", "nvrtc"; did you mean "nvrtc"?'
        ],
    ),
    (
        "compiler-not-a-string",
        "[tool.cudaq]\ncompiler = 12\n",
        [
            'tool.cudaq.compiler: 12 is an integer; expected "auto", "nvcc" or "nvrtc"; '
            'write it like "auto"'
        ],
    ),
    (
        "unknown-key-no-guess",
        "[tool.cudaq]\nverbose = true\n",
        [
            'tool.cudaq.verbose: unknown key "verbose"; expected one of: dispatch-kernels, '
            "compiler; remove it (accepted keys: dispatch-kernels, compiler)"
        ],
    ),
    (
        "cudaq-not-a-table",
        "[tool]\ncudaq = 3\n",
        [
            "tool.cudaq: 3 is an integer; expected a table { dispatch-kernels = {...}, "
            'compiler = "..." }; '
            "write a table: [tool.cudaq]"
        ],
    ),
    (
        "kernels-is-array",
        '[tool.cudaq]\ndispatch-kernels = ["src/my_dispatcher.cu"]\n',
        [
            f'{DK}: ["src/my_dispatcher.cu"] is an array; expected a table of <target> = '
            f"{ACCEPTED_ENTRY}; key each entry by its target: "
            f'[{DK}] _core = ["src/my_dispatcher.cu"]'
        ],
    ),
    (
        "short-form-string",
        f'[{DK}]\n_core = "src/my_dispatcher.cu"\n',
        [
            f'{DK}._core: "src/my_dispatcher.cu" is a string; expected {ACCEPTED_ENTRY}; '
            'did you mean ["src/my_dispatcher.cu"]?'
        ],
    ),
    (
        "entry-integer",
        f"[{DK}]\n_core = 5\n",
        [
            f"{DK}._core: 5 is an integer; expected {ACCEPTED_ENTRY}; "
            'write it like ["src/my_dispatcher.cu"]'
        ],
    ),
    (
        "no-kernels",
        f"[{DK}]\n",
        [
            f"{DK}: empty table; expected at least 1 entry <target> = {ACCEPTED_ENTRY}; "
            'add one, e.g. _core = ["src/my_dispatcher.cu"], or remove the table'
        ],
    ),
    (
        "short-form-empty",
        f"[{DK}]\n_core = []\n",
        [
            f"{DK}._core: empty array []; expected {ACCEPTED_SOURCES} (at least 1); "
            "list at least one, or remove the entry"
        ],
    ),
    (
        "long-form-empty-table",
        f"[{DK}]\n_core = {{}}\n",
        [
            f"{DK}._core: {{}} lacks the required key sources; expected {ACCEPTED_ENTRY}; "
            "add sources = [...]"
        ],
    ),
    (
        "long-form-misspelled-sources",
        f'[{DK}]\n_core = {{ sorces = ["src/my_dispatcher.cu"] }}\n',
        [
            f'{DK}._core.sorces: unknown key "sorces"; expected one of: sources, architectures; '
            "did you mean sources?"
        ],
    ),
    (
        "long-form-abbreviated-architectures",
        f'[{DK}]\n_core = {{ sources = ["src/other.cu"], archs = ["90"] }}\n',
        [
            f'{DK}._core.archs: unknown key "archs"; expected one of: sources, '
            "architectures; did you mean architectures?"
        ],
    ),
    (
        "long-form-misspelled-architectures",
        f'[{DK}]\n_core = {{ sources = ["src/other.cu"], architecture = ["90"] }}\n',
        [
            f'{DK}._core.architecture: unknown key "architecture"; expected one of: sources, '
            "architectures; did you mean architectures?"
        ],
    ),
    (
        "long-form-sources-string",
        f'[{DK}]\n_core = {{ sources = "src/other.cu" }}\n',
        [
            f'{DK}._core.sources: "src/other.cu" is a string; expected {ACCEPTED_SOURCES}; '
            'did you mean ["src/other.cu"]?'
        ],
    ),
    (
        "missing-file-close-match",
        f'[{DK}]\n_core = ["src/my_dispatch.cu"]\n',
        [
            f'{DK}._core[0]: "src/my_dispatch.cu" does not exist in {{project}}; '
            'did you mean "src/my_dispatcher.cu"?'
        ],
    ),
    (
        "missing-file-no-match",
        f'[{DK}]\n_core = ["zzz.cu"]\n',
        [
            f'{DK}._core[0]: "zzz.cu" does not exist in {{project}}; '
            "check the path: it is relative to {project}"
        ],
    ),
    (
        "not-cu",
        f'[{DK}]\n_core = ["src/kernel.cpp"]\n',
        [
            f'{DK}._core[0]: "src/kernel.cpp" is not a .cu file; expected {ACCEPTED_SOURCE}; '
            "a dispatch kernel is a CUDA source: give the file the .cu suffix (or list a .py file "
            "of Python handlers)"
        ],
    ),
    (
        "not-cu-with-cu-twin",
        f'[{DK}]\n_core = ["src/my_dispatcher.cpp"]\n',
        [
            f'{DK}._core[0]: "src/my_dispatcher.cpp" is not a .cu file; expected '
            f'{ACCEPTED_SOURCE}; did you mean "src/my_dispatcher.cu"?'
        ],
    ),
    (
        "header",
        f'[{DK}]\n_core = ["src/k.cuh"]\n',
        [
            f'{DK}._core[0]: "src/k.cuh" is not a .cu file; expected {ACCEPTED_SOURCE}; '
            "headers are found through #include: list only the kernel's .cu file"
        ],
    ),
    (
        "absolute-inside-project",
        f'[{DK}]\n_core = ["{{project}}/src/other.cu"]\n',
        [
            f'{DK}._core[0]: "{{project}}/src/other.cu" is an absolute path; expected '
            f'{ACCEPTED_SOURCE}; did you mean "src/other.cu"?'
        ],
    ),
    (
        "absolute-outside-project",
        f'[{DK}]\n_core = ["/opt/kernels/k.cu"]\n',
        [
            f'{DK}._core[0]: "/opt/kernels/k.cu" is an absolute path; expected '
            f"{ACCEPTED_SOURCE}; {IN_PROJECT}"
        ],
    ),
    (
        "outside-project",
        f'[{DK}]\n_core = ["../shared/k.cu"]\n',
        [
            f'{DK}._core[0]: "../shared/k.cu" is outside the project directory; expected '
            f"{ACCEPTED_SOURCE}; {IN_PROJECT}"
        ],
    ),
    (
        "directory",
        f'[{DK}]\n_core = ["folder.cu"]\n',
        [
            f'{DK}._core[0]: "folder.cu" is a directory; expected {ACCEPTED_SOURCE}; '
            "name the kernel file itself"
        ],
    ),
    (
        "source-not-string",
        f"[{DK}]\n_core = [42]\n",
        [
            f"{DK}._core[0]: 42 is an integer; expected {ACCEPTED_SOURCE}; "
            'write it like "src/my_dispatcher.cu"'
        ],
    ),
    (
        "source-empty-string",
        f'[{DK}]\n_core = [""]\n',
        [
            f'{DK}._core[0]: empty path ""; expected {ACCEPTED_SOURCE}; '
            "write the kernel file's path, e.g. src/my_dispatcher.cu"
        ],
    ),
    (
        "duplicate-source-in-target",
        f'[{DK}]\n_core = ["src/other.cu", "./src/other.cu"]\n',
        [
            f'{DK}._core[1]: "./src/other.cu" repeats item [0] ("src/other.cu"); expected '
            f"{ACCEPTED_SOURCES}, each once; remove the duplicate"
        ],
    ),
    (
        "same-source-two-targets",
        f'[{DK}]\na = ["src/other.cu"]\nb = {{ sources = ["src/my_dispatcher.cu", '
        '"src/other.cu"] }\n',
        [
            f'{DK}.b.sources[1]: "src/other.cu" is already the dispatch kernel of target "a" '
            f"({DK}.a[0]); expected each kernel source under one target; keep it under one "
            "target (each binary links its own kernel), or copy it to a second .cu file"
        ],
    ),
    (
        "same-source-two-targets-and-a-bad-entry",
        f'[{DK}]\na = ["src/other.cu"]\nb = ["src/other.cu"]\nc = ["src/kernel.cpp"]\n',
        [
            f'{DK}.c[0]: "src/kernel.cpp" is not a .cu file; expected {ACCEPTED_SOURCE}; '
            "a dispatch kernel is a CUDA source: give the file the .cu suffix (or list a .py file "
            "of Python handlers)",
            f'{DK}.b[0]: "src/other.cu" is already the dispatch kernel of target "a" '
            f"({DK}.a[0]); expected each kernel source under one target; keep it under one "
            "target (each binary links its own kernel), or copy it to a second .cu file",
        ],
    ),
    (
        "arch-below-80",
        arch_body("[75]"),
        [
            f"{DK}._core.architectures[0]: 75 is below 80, the oldest supported architecture; "
            f'expected {ACCEPTED_ARCH}; use "80": the realtime dispatcher needs sm_80 or newer, '
            "and its LTO-IR links for every newer GPU"
        ],
    ),
    (
        "arch-sm-below-80",
        arch_body('["sm_70"]'),
        [
            f'{DK}._core.architectures[0]: "sm_70" is below 80, the oldest supported '
            f'architecture; expected {ACCEPTED_ARCH}; use "80": the realtime dispatcher needs '
            "sm_80 or newer, and its LTO-IR links for every newer GPU"
        ],
    ),
    (
        "arch-compute-capability",
        arch_body('["9.0"]'),
        [
            f'{DK}._core.architectures[0]: "9.0" looks like a compute capability; expected '
            f'{ACCEPTED_ARCH}; did you mean "90"?'
        ],
    ),
    (
        "arch-float",
        arch_body("[90.0]"),
        [
            f"{DK}._core.architectures[0]: 90.0 is a float; expected {ACCEPTED_ARCH}; "
            'did you mean "90"?'
        ],
    ),
    (
        "arch-specific-variant",
        arch_body('["90a"]'),
        [
            f'{DK}._core.architectures[0]: "90a" is an architecture-specific variant, which '
            f"LTO-IR dispatch kernels do not support; expected {ACCEPTED_ARCH}; "
            'use "90": its LTO-IR links for that GPU and every newer one'
        ],
    ),
    (
        "arch-cmake-real",
        arch_body('["80-real"]'),
        [
            f'{DK}._core.architectures[0]: "80-real" is a CMake architecture; expected '
            f"{ACCEPTED_ARCH} (dispatch kernels are always built as LTO-IR); "
            'did you mean "80"?'
        ],
    ),
    (
        "arch-native",
        arch_body('["native"]'),
        [
            f'{DK}._core.architectures[0]: "native" is not an architecture; expected '
            f"{ACCEPTED_ARCH}; write the number of the oldest GPU architecture to support, "
            "e.g. 80 for sm_80"
        ],
    ),
    (
        "arch-spaces",
        arch_body('[" 90"]'),
        [
            f'{DK}._core.architectures[0]: " 90" has surrounding spaces; expected '
            f'{ACCEPTED_ARCH}; did you mean "90"?'
        ],
    ),
    (
        "arch-boolean",
        arch_body("[true]"),
        [
            f"{DK}._core.architectures[0]: true is a boolean; expected {ACCEPTED_ARCH}; "
            'write it like "80"'
        ],
    ),
    (
        "arch-duplicate-spellings",
        arch_body('[80, "sm_80"]'),
        [
            f'{DK}._core.architectures[1]: "sm_80" repeats item [0] (80); expected '
            f"{ACCEPTED_ARCHS}, each once; remove the duplicate"
        ],
    ),
    (
        "arch-not-array",
        arch_body('"90"'),
        [
            f'{DK}._core.architectures: "90" is a string; expected {ACCEPTED_ARCHS}; '
            'did you mean ["90"]?'
        ],
    ),
    (
        "arch-empty",
        arch_body("[]"),
        [
            f"{DK}._core.architectures: empty array []; expected {ACCEPTED_ARCHS} (at least 1); "
            'list at least one, or remove the key to use the default ["80"]'
        ],
    ),
    (
        "target-empty",
        f'[{DK}]\n"" = ["src/other.cu"]\n',
        [
            f'{DK}."": empty target name ""; expected {ACCEPTED_TARGET}; use the name of the '
            "target (CMake) or extension (setuptools) that holds the handlers"
        ],
    ),
    (
        "target-whitespace",
        f'[{DK}]\n"my core" = ["src/other.cu"]\n',
        [
            f'{DK}."my core": "my core" is not a valid target name; expected {ACCEPTED_TARGET} '
            '(letters, digits and _ . + -); did you mean "my_core"?'
        ],
    ),
    (
        "target-is-long-form-key",
        f'[{DK}]\nsources = ["src/other.cu"]\n',
        [
            f'{DK}.sources: "sources" is a key of a dispatch kernel entry, not a target name; '
            f"expected {ACCEPTED_TARGET}; put it under the target: _core = {{ sources = [...] }}"
        ],
    ),
]


@pytest.mark.parametrize(
    ("body", "expected"),
    [pytest.param(body, expected, id=name) for name, body, expected in MALFORMED],
)
def test_malformed_settings_report_exact_problem(
    project: Path, body: str, expected: list[str]
) -> None:
    resolved = str(project.resolve())
    body = body.replace("{project}", resolved)
    assert problems_of(project, body) == [e.replace("{project}", resolved) for e in expected]


def test_every_problem_is_reported_at_once(project: Path) -> None:
    pyproject = write(
        project,
        f"""\
        [tool.cudaq]
        verbsoe = true

        [{DK}]
        _core = ["src/my_dispatcher.cu", "src/kernel.cpp"]
        "pkg._x" = {{ sources = ["src/other.cu"], architectures = [75, "90"] }}
        "bad name" = ["kernels/cluster_dispatcher.cu"]
        """,
    )
    with pytest.raises(SettingsError) as info:
        load_settings(pyproject)
    error = info.value
    assert [p.key for p in error.problems] == [
        "tool.cudaq.verbsoe",
        f"{DK}._core[1]",
        f'{DK}."pkg._x".architectures[0]',
        f'{DK}."bad name"',
    ]
    text = str(error)
    lines = text.splitlines()
    assert lines[0] == f"4 problems in [tool.cudaq] of {pyproject}:"
    assert lines[1:] == [f"  - {p}" for p in error.problems]
    assert "Traceback" not in text


def test_one_problem_header_is_singular(project: Path) -> None:
    pyproject = write(project, f'[{DK}]\n_core = ["zzz.cu"]\n')
    with pytest.raises(SettingsError) as info:
        load_settings(pyproject)
    assert str(info.value).splitlines()[0] == f"1 problem in [tool.cudaq] of {pyproject}:"


def test_short_form(project: Path) -> None:
    settings = load_settings(write(project, f'[{DK}]\n_core = ["src/my_dispatcher.cu"]\n'))
    assert settings == CudaqSettings(
        dispatch_kernels={
            "_core": DispatchKernelSettings(
                sources=("src/my_dispatcher.cu",), architectures=("80",)
            )
        }
    )


def test_long_form_and_architecture_spellings(project: Path) -> None:
    settings = load_settings(
        write(
            project,
            f"""\
            [{DK}]
            "pkg._core" = {{ sources = ["./src/other.cu", "kernels/cluster_dispatcher.cu"], \
architectures = [80, "sm_90", "lto_100", "compute_120", "103"] }}
            """,
        )
    )
    kernel = settings.dispatch_kernels["pkg._core"]
    assert kernel.sources == ("src/other.cu", "kernels/cluster_dispatcher.cu")
    assert kernel.architectures == ("80", "90", "100", "120", "103")


def test_long_form_without_architectures_gets_the_default(project: Path) -> None:
    settings = load_settings(write(project, f'[{DK}]\n_core = {{ sources = ["src/other.cu"] }}\n'))
    assert settings.dispatch_kernels["_core"].architectures == DEFAULT_ARCHITECTURES == ("80",)


def test_several_targets_keep_declaration_order(project: Path) -> None:
    settings = load_settings(
        write(
            project,
            f"""\
            [{DK}]
            zeta = ["src/other.cu"]
            alpha = {{ sources = ["src/my_dispatcher.cu"], architectures = ["90"] }}
            "pkg.sub._ext" = ["kernels/cluster_dispatcher.cu"]
            """,
        )
    )
    assert list(settings.dispatch_kernels) == ["zeta", "alpha", "pkg.sub._ext"]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("", id="no-tool-table"),
        pytest.param("[tool.other]\nx = 1\n", id="no-cudaq-table"),
        pytest.param("[tool.cudaq]\n", id="empty-cudaq"),
    ],
)
def test_defaults(project: Path, body: str) -> None:
    settings = load_settings(write(project, body))
    assert settings == CudaqSettings()
    assert settings.dispatch_kernels == {}


def test_source_paths_are_absolute_and_resolved(project: Path) -> None:
    settings = load_settings(
        write(project, f'[{DK}]\n_core = ["src/../src/other.cu", "src/my_dispatcher.cu"]\n')
    )
    kernel = settings.dispatch_kernels["_core"]
    assert kernel.sources == ("src/other.cu", "src/my_dispatcher.cu")
    paths = kernel.source_paths(project)
    assert paths == (
        (project / "src/other.cu").resolve(),
        (project / "src/my_dispatcher.cu").resolve(),
    )
    assert all(p.is_absolute() and p.is_file() for p in paths)


def test_parse_settings_takes_the_table_and_project_dir(project: Path) -> None:
    settings = parse_settings(
        {"dispatch-kernels": {"_core": {"sources": ["src/other.cu"], "architectures": [90]}}},
        project,
    )
    assert settings.dispatch_kernels["_core"] == DispatchKernelSettings(
        sources=("src/other.cu",), architectures=("90",)
    )
    with pytest.raises(SettingsError) as info:
        parse_settings({"dispatch-kernels": {"_core": ["src/other.cu"]}}, project / "elsewhere")
    assert info.value.source == "pyproject.toml"
    assert info.value.problems[0].key == f"{DK}._core[0]"


def test_settings_are_frozen_dataclasses() -> None:
    kernel = DispatchKernelSettings(sources=("a.cu",))
    assert kernel.architectures == ("80",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        kernel.sources = ("b.cu",)  # type: ignore[misc]


def test_unreadable_pyproject_is_a_cudaq_error(tmp_path: Path) -> None:
    with pytest.raises(CudaqError, match=r"cannot read .*missing\.toml"):
        load_settings(tmp_path / "missing.toml")
    broken = tmp_path / "pyproject.toml"
    broken.write_text("[tool.cudaq\n")
    with pytest.raises(CudaqError, match=r"cannot read .*pyproject.toml: .*line 1"):
        load_settings(broken)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def test_check_cli_prints_every_problem_without_traceback(project: Path) -> None:
    write(project, f'[{DK}]\n_core = ["zzz.cu", "src/kernel.cpp"]\n"a b" = ["src/other.cu"]\n')
    proc = run_cli("schema", "--check", cwd=project)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith(
        "skbuild-cudaq: error: 3 problems in [tool.cudaq] of pyproject.toml:\n"
    )
    assert f"  - {DK}._core[0]: " in proc.stderr
    assert f"  - {DK}._core[1]: " in proc.stderr
    assert f'  - {DK}."a b": ' in proc.stderr
    assert "Traceback" not in proc.stderr


def test_check_cli_accepts_a_good_pyproject(project: Path) -> None:
    pyproject = write(
        project, f'[{DK}]\n_core = {{ sources = ["src/other.cu"], architectures = [80, 90] }}\n'
    )
    proc = run_cli("schema", "--check", str(pyproject), cwd=project.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"{pyproject}: [tool.cudaq] is valid: 1 dispatch kernel\n"
        "  _core: src/other.cu (architectures 80, 90)\n"
    )


# ---------------------------------------------------------------------------------------------
# Sources that escape the project, and hostile values: a message, never a traceback (issue 11)
# ---------------------------------------------------------------------------------------------
UNSAFE = ';[]$`"\\|:'


@pytest.mark.parametrize("char", [*UNSAFE, "\n", "\t", "\x7f"], ids=repr)
def test_characters_cmake_or_nvcc_misread_are_refused(project: Path, char: str) -> None:
    """Even when the file exists: ``a;b.cu`` would be two paths to CMake."""
    name = f"src/k{char}x.cu"
    if char not in "/\\":
        (project / name).write_text("// exists\n")
    body = f"[{DK}]\n_core = [{json.dumps(name)}]\n"
    (problem,) = problems_of(project, body)
    assert problem.startswith(f"{DK}._core[0]: {json.dumps(name, ensure_ascii=False)} contains ")
    assert "which CMake, make or nvcc would misread; expected a .cu path" in problem
    assert "CMake splits a path at ; into two paths" in problem


def test_semicolon_naming_a_file_outside_the_project_is_refused(project: Path) -> None:
    """The reported attack: the part after ; names a file anywhere; both halves exist."""
    outside = project.parent / "evil.cu"
    outside.write_text("// not ours\n")
    (project / "src/other.cu;").mkdir()
    (project / "src/other.cu;/evil.cu").write_text("// exists too\n")
    body = f'[{DK}]\n_core = ["src/other.cu;/evil.cu"]\n'
    (problem,) = problems_of(project, body)
    assert problem.startswith(f'{DK}._core[0]: "src/other.cu;/evil.cu" contains ;, which CMake')


def test_symlinked_source_outside_the_project_is_refused(project: Path) -> None:
    outside = project.parent / "elsewhere"
    outside.mkdir()
    (outside / "k.cu").write_text("// outside\n")
    (project / "src/link.cu").symlink_to(outside / "k.cu")
    (project / "linked_dir").symlink_to(outside, target_is_directory=True)
    body = f'[{DK}]\n_core = ["src/link.cu"]\n"pkg.b" = {{ sources = ["linked_dir/k.cu"] }}\n'
    problems = problems_of(project, body)
    real = json.dumps(str((outside / "k.cu").resolve()))
    assert problems == [
        f'{DK}._core[0]: "src/link.cu" is a symbolic link (or lies under one) that resolves '
        f"outside the project directory, to {real}; expected a .cu path relative to the project "
        "directory; copy the file into the project: an sdist ships the link itself, which points "
        "nowhere on another machine, and the build would compile a file from outside the project",
        f'{DK}."pkg.b".sources[0]: "linked_dir/k.cu" is a symbolic link (or lies under one) that '
        f"resolves outside the project directory, to {real}; expected a .cu path relative to the "
        "project directory; copy the file into the project: an sdist ships the link itself, "
        "which points nowhere on another machine, and the build would compile a file from "
        "outside the project",
    ]


def test_symlinked_source_inside_the_project_is_accepted(project: Path) -> None:
    (project / "src/alias.cu").symlink_to(project / "src/other.cu")
    settings = load_settings(write(project, f'[{DK}]\n_core = ["src/alias.cu"]\n'))
    assert settings.dispatch_kernels["_core"].sources == ("src/alias.cu",)


def test_project_directory_with_a_semicolon_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "my;proj"
    (project / "src").mkdir(parents=True)
    (project / "src/k.cu").write_text("// k\n")
    (problem,) = problems_of(project, f'[{DK}]\n_core = ["src/k.cu"]\n')
    real = json.dumps(str((project / "src/k.cu").resolve()))
    assert problem == (
        f'{DK}._core[0]: "src/k.cu" resolves to {real}, whose directories contain ;, which '
        "CMake, make or nvcc would misread; expected a .cu path in a directory without them; "
        "move the project to a directory whose path has none of these characters"
    )


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        pytest.param("src/" + "a" * 300 + ".cu", "File name too long", id="component-300-bytes"),
        pytest.param("src/" + "é" * 130 + ".cu", "File name too long", id="component-263-bytes"),
        pytest.param("/".join(["d" * 200] * 25) + "/k.cu", "File name too long", id="path-5000"),
        pytest.param("src/" + "a" * 300 + ".cpp", "File name too long", id="not-cu-300-bytes"),
    ],
)
def test_path_the_file_system_refuses_is_a_problem(project: Path, source: str, reason: str) -> None:
    (problem,) = problems_of(project, f"[{DK}]\n_core = [{json.dumps(source)}]\n")
    assert problem.startswith(f"{DK}._core[0]: {json.dumps(source, ensure_ascii=False)[:397]}")
    assert f"cannot be checked: {reason}; shorten it: a file or directory name has at most " in (
        problem
    )


def test_five_thousand_digit_architecture_is_a_problem(project: Path) -> None:
    digits = "9" * 5000
    problems = problems_of(project, arch_body(f'["{digits}", "sm_{digits}"]'))
    assert len(problems) == 2
    for index, shown in enumerate((digits, f"sm_{digits}")):
        problem = problems[index]
        assert problem.startswith(f'{DK}._core.architectures[{index}]: "{shown[:396]}... is ')
        assert problem.endswith(
            f"is too large for a GPU architecture (at most 9999); expected {ACCEPTED_ARCH}; "
            "write the number of the oldest GPU architecture to support, e.g. 90 for sm_90"
        )
    # As a TOML integer the file itself cannot be read (Python refuses > 4300 digits).
    pyproject = write(project, arch_body(f"[{digits}]"))
    with pytest.raises(CudaqError) as info:
        load_settings(pyproject)
    assert str(info.value) == (
        f"cannot read {pyproject}: a value cannot be read (Exceeds the limit (4300 digits) for "
        "integer string conversion: value has 5000 digits)"
    )
    # parse_settings takes Python values: a huge int is shown shortened, never str()'d.
    with pytest.raises(SettingsError) as parsed:
        entry = {"sources": ["src/other.cu"], "architectures": [10**5000]}
        parse_settings({"dispatch-kernels": {"_core": entry}}, project)
    assert str(parsed.value.problems[0]) == (
        f"{DK}._core.architectures[0]: <an integer of 16610 bits> is too large for a GPU "
        f"architecture (at most 9999); expected {ACCEPTED_ARCH}; write the number of the oldest "
        "GPU architecture to support, e.g. 90 for sm_90"
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(
            b'[tool.cudaq.dispatch-kernels]\n_core = ["src/\xff\xfe.cu"]\n',
            "it is not UTF-8 text (byte 0xff on line 6)",
            id="invalid-utf8",
        ),
        pytest.param(
            b"[tool.cudaq]\nx = " + b"[" * 5000 + b"]" * 5000 + b"\n",
            "arrays or tables are nested too deeply to be read",
            id="nested-arrays",
        ),
        pytest.param(
            b"[tool.cudaq]\nx = " + b"{a = " * 3000 + b"1" + b"}" * 3000 + b"\n",
            "arrays or tables are nested too deeply to be read",
            id="nested-inline-tables",
        ),
        pytest.param(
            b"[tool.cudaq]\nx = " + b"1" * 5000 + b"\n",
            "a value cannot be read (Exceeds the limit (4300 digits) for integer string "
            "conversion: value has 5000 digits)",
            id="5000-digit-integer",
        ),
    ],
)
def test_unreadable_toml_is_one_line_at_every_front_door(
    tmp_path: Path, data: bytes, reason: str
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    pyproject = project / "pyproject.toml"
    pyproject.write_bytes(HEAD.encode() + data)
    with pytest.raises(CudaqError) as info:
        load_settings(pyproject)
    assert str(info.value) == f"cannot read {pyproject}: {reason}"
    # schema --check
    proc = run_cli("schema", "--check", cwd=project)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"skbuild-cudaq: error: cannot read pyproject.toml: {reason}\n"
    # the PEP 517 backend
    hook = subprocess.run(
        [sys.executable, "-c", "import skbuild_cudaq.build as b; b.get_requires_for_build_sdist()"],
        cwd=project, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert hook.returncode == 1, hook.stderr
    assert hook.stderr == f"skbuild-cudaq: error: cannot read {pyproject}: {reason}\n"
    # the setuptools hook never raises: the file is not taken as a [tool.cudaq] project
    from skbuild_cudaq.setuptools.hook import project_uses_cudaq

    assert project_uses_cudaq(pyproject) is False


@pytest.mark.parametrize(
    ("body", "key", "fragment"),
    [
        pytest.param(
            arch_body('["' + "9" * 5000 + '"]'),
            f"{DK}._core.architectures[0]",
            "is too large for a GPU architecture (at most 9999)",
            id="5000-digit-architecture",
        ),
        pytest.param(
            f'[{DK}]\n_core = ["src/{"a" * 300}.cu"]\n',
            f"{DK}._core[0]",
            "cannot be checked: File name too long; shorten it",
            id="300-byte-component",
        ),
        pytest.param(
            f'[{DK}]\n_core = ["src/other.cu;../../../etc/x.cu"]\n',
            f"{DK}._core[0]",
            "contains ;, which CMake, make or nvcc would misread",
            id="semicolon",
        ),
    ],
)
def test_check_cli_reports_hostile_values_in_one_line_each(
    project: Path, body: str, key: str, fragment: str
) -> None:
    write(project, body)
    proc = run_cli("schema", "--check", cwd=project)
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == "skbuild-cudaq: error: 1 problem in [tool.cudaq] of pyproject.toml:"
    assert len(lines) == 2 and lines[1].startswith(f"  - {key}: ") and fragment in lines[1]


def test_a_source_that_is_not_a_regular_file_says_so(project: Path) -> None:
    """A FIFO (nvcc would wait on it) or a link to /dev/zero (read for ever) used to be
    reported as missing, with itself as the suggestion."""
    os.mkfifo(project / "src/fifo.cu")
    (project / "src/zero.cu").symlink_to("/dev/zero")
    (project / "src/dangling.cu").symlink_to(project / "src/gone.cu")
    body = f'[{DK}]\n_core = ["src/fifo.cu", "src/zero.cu", "src/dangling.cu"]\n'
    gone = json.dumps(str(project / "src/gone.cu"))
    assert problems_of(project, body) == [
        f'{DK}._core[0]: "src/fifo.cu" is a named pipe (FIFO), not a regular file; expected a '
        ".cu path relative to the project directory; a kernel source must be a regular file "
        "(nvcc would wait on a pipe, or read a device for ever): put the kernel's .cu file "
        "itself there",
        f'{DK}._core[1]: "src/zero.cu" is a character device, not a regular file; expected a '
        ".cu path relative to the project directory; a kernel source must be a regular file "
        "(nvcc would wait on a pipe, or read a device for ever): put the kernel's .cu file "
        "itself there",
        f'{DK}._core[2]: "src/dangling.cu" is a symbolic link to a file that does not exist '
        f"({gone}); expected a .cu path relative to the project directory; point the link at "
        "the kernel's .cu file, or list that file itself",
    ]


def test_every_accepted_architecture_spelling_is_documented(tmp_path: Path) -> None:
    """What the grammar accepts (``architectures.txt``: a number, bare or with a prefix) is
    what the setting's help (the reference table) and the pyproject guide say: ``compute_90``
    is accepted because it is documented, not by accident."""
    from conftest import ROOT

    from skbuild_cudaq._architectures import PREFIXES

    (spec,) = [f for f in dataclasses.fields(DispatchKernelSettings) if f.name == "architectures"]
    help_text = spec.metadata["help"]
    guide = (ROOT / "docs" / "guides" / "pyproject.md").read_text(encoding="utf-8")
    assert set(PREFIXES) == {"sm", "lto", "compute"}
    for prefix in PREFIXES:
        assert f'"{prefix}_80"' in help_text, prefix
        assert f'`"{prefix}_80"`' in guide, prefix
    (tmp_path / "k.cu").write_text("// k\n")
    settings = parse_settings(
        {"dispatch-kernels": {"_core": {"sources": ["k.cu"], "architectures": ["compute_90"]}}},
        tmp_path,
    )
    assert settings.dispatch_kernels["_core"].architectures == ("90",)


def test_the_long_form_keys_the_target_rule_refuses_are_the_models() -> None:
    """The target-name rule knows the long form's keys without importing the model (which is
    built from the rules): the two lists stay equal."""
    from skbuild_cudaq.settings._fields import field_specs
    from skbuild_cudaq.settings._model import DispatchKernelSettings
    from skbuild_cudaq.settings._rules import LONG_FORM_KEYS

    assert [spec.key for spec in field_specs(DispatchKernelSettings)] == list(LONG_FORM_KEYS)
