"""The CMake package's precondition messages, exact text (configure only, fast).

Each case configures a two-line project with ``LANGUAGES NONE`` (no compiler
detection) against ``skbuild_cudaq/cmake`` and checks the FATAL_ERROR text
(CMake re-wraps long messages: whitespace is normalised before comparing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import skbuild_cudaq

pytestmark = pytest.mark.toolchain

CMAKE = shutil.which("cmake")


def configure(tmp_path: Path, body: str, env: dict[str, str] | None = None, *args: str) -> str:
    """Configure a project whose CMakeLists.txt ends with ``body``; return stderr (must fail)."""
    if CMAKE is None:
        pytest.skip("cmake not on PATH")
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k() {}\n')
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\n"
        "project(errors LANGUAGES NONE)\n"
        "add_library(mod MODULE)\n"
        "find_package(skbuild_cudaq CONFIG REQUIRED)\n" + body
    )
    proc = subprocess.run(
        [CMAKE, "-S", str(tmp_path), "-B", str(tmp_path / "build"),
         f"-Dskbuild_cudaq_DIR={skbuild_cudaq.cmake_dir()}", *args],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return " ".join(proc.stderr.split())


def expect(stderr: str, message: str) -> None:
    assert " ".join(message.split()) in stderr, stderr


def test_unknown_target(tmp_path: Path) -> None:
    stderr = configure(tmp_path, "cudaq_realtime_add_dispatch_kernel(nope k.cu)\n")
    expect(
        stderr,
        'skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(nope): no CMake target named "nope". '
        "Create the target (add_library, python_add_library, nanobind_add_module, ...) before "
        "this call, or correct the name.",
    )


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("mdo", 'Did you mean "mod"?'),  # a transposition
        ("MOD", 'Did you mean "mod"?'),  # case
        ("module_x", 'Did you mean "module"?'),  # the closest of several
        ("nope", "Targets of this project: mod, module."),  # nothing close: all of them
    ],
)
def test_unknown_target_suggests_the_closest(tmp_path: Path, name: str, hint: str) -> None:
    stderr = configure(
        tmp_path,
        "add_library(module MODULE)\nadd_custom_target(modx)\n"
        f"cudaq_realtime_add_dispatch_kernel({name} k.cu)\n",
    )
    expect(stderr, f'no CMake target named "{name}".')
    expect(stderr, f"correct the name. {hint}")
    assert "modx" not in stderr  # a custom target cannot take device code


def test_missing_file(tmp_path: Path) -> None:
    stderr = configure(tmp_path, "cudaq_realtime_add_dispatch_kernel(mod missing.cu)\n")
    expect(
        stderr,
        'skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(mod): source file "missing.cu" does '
        f"not exist (looked for {tmp_path / 'missing.cu'}).",
    )


@pytest.mark.parametrize("arch", ["75", "sm80x", "80.5"])
def test_bad_architecture(tmp_path: Path, arch: str) -> None:
    stderr = configure(
        tmp_path, f"cudaq_realtime_add_dispatch_kernel(mod k.cu ARCHITECTURES 80 {arch})\n"
    )
    expect(
        stderr,
        f'skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(mod): architecture "{arch}" is not '
        "supported: dispatch kernels are LTO-IR for sm_80 or newer. Use a number >= 80 such as "
        "80 or 90 (LTO-IR built for one architecture links for that GPU and every newer one).",
    )


def test_nvcc_not_found(tmp_path: Path) -> None:
    assert CMAKE is not None or pytest.skip("cmake not on PATH")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    drop = {"CUDACXX", "CMAKE_CUDA_COMPILER", "CUDA_HOME", "CUDA_PATH"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = str(empty)
    env["SKBUILD_CUDAQ_CUDA_ROOTS"] = ""  # not this machine's /usr/local/cuda
    # PATH (empty) is the only directory searched: not CMake's system prefixes.
    stderr = configure(
        tmp_path,
        "cudaq_realtime_add_dispatch_kernel(mod k.cu)\n",
        env,
        f"-DCMAKE_MAKE_PROGRAM={shutil.which('make') or shutil.which('ninja')}",
    )
    expect(
        stderr,
        "skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(mod): nvcc not found: it compiles the "
        "dispatch kernels to LTO-IR. Looked in, in order: - CMAKE_CUDA_COMPILER (CMake variable): "
        "not set - CMAKE_CUDA_COMPILER (environment): not set - CUDACXX (environment): not set - "
        f"nvcc on PATH ({empty}): not found - $CUDA_HOME/bin/nvcc: CUDA_HOME not set",
    )
    expect(
        stderr,
        "Install a CUDA toolkit and set CUDA_HOME to it (or put its bin directory on PATH, or set "
        "CMAKE_CUDA_COMPILER to its nvcc), or `pip install nvidia-cuda-nvcc` (add it to "
        "build-system.requires).",
    )


def test_static_library_is_refused(tmp_path: Path) -> None:
    stderr = configure(
        tmp_path, "add_library(st STATIC)\ncudaq_realtime_add_dispatch_kernel(st k.cu)\n"
    )
    expect(stderr, 'target "st" is a STATIC_LIBRARY; device code can only be embedded into a')


ONCE = "each source is compiled and embedded once per target. Remove one of the two"


@pytest.mark.parametrize(
    ("body", "second", "first"),
    [
        ("cudaq_realtime_add_dispatch_kernel(mod k.cu ./k.cu)\n",
         "cudaq_realtime_add_dispatch_kernel(mod)", "cudaq_realtime_add_dispatch_kernel(mod)"),
        ("cudaq_realtime_add_dispatch_kernel(mod k.cu)\n"
         "cudaq_realtime_add_device_sources(mod ${CMAKE_CURRENT_SOURCE_DIR}/k.cu)\n",
         "cudaq_realtime_add_device_sources(mod)", "cudaq_realtime_add_dispatch_kernel(mod)"),
    ],
)  # fmt: skip
def test_one_source_twice_on_a_target_names_both_calls(
    tmp_path: Path, nvcc: Path, body: str, second: str, first: str
) -> None:
    """CMake said only "Files to be generated by multiple different commands", at generate
    time, naming a build-tree file."""
    stderr = configure(tmp_path, "enable_language(C)\n" + body)
    expect(
        stderr,
        f'skbuild-cudaq: {second}: source file "k.cu" is already device code of target "mod" '
        f"(added by {first}); {ONCE}",
    )
    assert "multiple different commands" not in stderr


def test_pyproject_kernel_also_added_in_cmake_names_the_key(tmp_path: Path, nvcc: Path) -> None:
    """The backend's [tool.cudaq.dispatch-kernels] entry (its defines, as the backend passes
    them) for a file the CMakeLists.txt adds itself: the entry's key is named."""
    cmake = skbuild_cudaq.cmake_dir()
    stderr = configure(
        tmp_path,
        "enable_language(C)\ncudaq_realtime_add_dispatch_kernel(mod k.cu)\n",
        None,
        f"-DCMAKE_PROJECT_INCLUDE={cmake / 'skbuild_cudaq_auto.cmake'}",
        "-DSKBUILD_CUDAQ_KERNEL_COUNT=1",
        "-DSKBUILD_CUDAQ_KERNEL_0_TARGET=mod",
        f"-DSKBUILD_CUDAQ_KERNEL_0_SOURCES={tmp_path / 'k.cu'}",
        "-DSKBUILD_CUDAQ_KERNEL_0_ARCHITECTURES=80",
    )
    expect(
        stderr,
        'skbuild-cudaq: tool.cudaq.dispatch-kernels.mod: source file "k.cu" is already device '
        f'code of target "mod" (added by cudaq_realtime_add_dispatch_kernel(mod)); {ONCE}: a '
        "file declared in [tool.cudaq.dispatch-kernels] needs no CMake call.",
    )


def test_handlers_need_the_cuda_language(tmp_path: Path) -> None:
    stderr = configure(tmp_path, "cudaq_realtime_add_handlers(mod k.cu)\n")
    expect(
        stderr,
        "skbuild-cudaq: cudaq_realtime_add_handlers(mod): the project does not enable the CUDA "
        "language.",
    )


def test_config_version_matches_the_python_package() -> None:
    text = (skbuild_cudaq.cmake_dir() / "skbuild_cudaqConfigVersion.cmake").read_text()
    assert f'set(PACKAGE_VERSION "{skbuild_cudaq.__version__}")' in text


# Sources that escape the project (issue 11): a ";" inside one argument would be split by CMake
# into two paths (the second may name any file); "[" keeps ";"-lists together; "$" and "`" reach
# a shell through nvcc; ":" and "|" break make and ninja rules.
UNSAFE_MESSAGE = (
    'contains one of ; [ ] $ ` " \\ | : or a control character, which CMake, make or nvcc would '
    "misread (CMake splits a path at ; into two paths); rename the file or its directory."
)


@pytest.mark.parametrize(
    "command",
    [
        "cudaq_realtime_add_dispatch_kernel",
        "cudaq_realtime_add_device_sources",
        "cudaq_realtime_add_handlers",
    ],
)
def test_semicolon_inside_one_source_argument_is_refused(tmp_path: Path, command: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "evil.cu").write_text("// both halves exist\n")
    stderr = configure(tmp_path, f"{command}(mod [==[a;evil.cu]==])\n")
    expect(stderr, f'skbuild-cudaq: {command}(mod): source path "a;evil.cu" {UNSAFE_MESSAGE}')


@pytest.mark.parametrize("char", ["[", "]", "$", "`", "|", ":"])
def test_characters_cmake_make_or_nvcc_misread_are_refused(tmp_path: Path, char: str) -> None:
    name = f"k{char}x.cu"
    (tmp_path / name).write_text("// exists\n")
    stderr = configure(tmp_path, f"cudaq_realtime_add_dispatch_kernel(mod [==[{name}]==] k.cu)\n")
    expect(
        stderr,
        f'skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(mod): source path "{name}" '
        f"{UNSAFE_MESSAGE}",
    )


def test_symlink_resolving_outside_the_project_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    outside = tmp_path / "outside.cu"
    outside.write_text('extern "C" __global__ void k() {}\n')
    (project / "link.cu").symlink_to(outside)
    stderr = configure(project, "cudaq_realtime_add_dispatch_kernel(mod link.cu)\n")
    expect(
        stderr,
        'skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(mod): source file "link.cu" is a '
        f"symbolic link (or lies under one) that resolves outside the project, to {outside}. "
        "Copy the file into the project: an sdist ships the link itself, which points nowhere "
        "on another machine.",
    )


@pytest.mark.parametrize("where", ["link-inside", "explicit-outside"])
def test_links_inside_and_explicit_outside_paths_pass_the_checks(
    tmp_path: Path, where: str
) -> None:
    """Refused only for a path that looks inside the project but is not: these pass on to
    the next check (LANGUAGES NONE: no C/CXX to embed with)."""
    project = tmp_path / "proj"
    project.mkdir()
    if where == "link-inside":
        (project / "alias.cu").symlink_to(project / "k.cu")
        source = "alias.cu"
    else:
        source = str(tmp_path / "generated.cu")
        Path(source).write_text("// generated\n")
    stderr = configure(project, f"cudaq_realtime_add_dispatch_kernel(mod {source})\n")
    assert "symbolic link" not in stderr
    expect(stderr, "the project enables neither C nor CXX")


@pytest.mark.parametrize("generator", ["Ninja", "Unix Makefiles"])
def test_characters_that_are_allowed_build(tmp_path: Path, nvcc: Path, generator: str) -> None:
    """The other side of the refused set: these characters pass through CMake, make, ninja and
    nvcc intact (``*/`` too, which once ended the generated file's comment)."""
    if CMAKE is None or shutil.which("ninja" if generator == "Ninja" else "make") is None:
        pytest.skip(f"cmake or the {generator} tool is not on PATH")
    dirs = ["k*", "a b#c", "p%(q)&r=s'!", "\u00e9t\u00e9~{x}@,+"]
    sources = []
    for index, name in enumerate(dirs):
        (tmp_path / name).mkdir()
        (tmp_path / name / "k.cu").write_text(f'extern "C" __global__ void k{index}() {{}}\n')
        sources.append(f"[==[{name}/k.cu]==]")
    (tmp_path / "lib.c").write_text("int f(void) { return 0; }\n")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(allowed LANGUAGES C)\n"
        "add_library(mod MODULE lib.c)\nfind_package(skbuild_cudaq CONFIG REQUIRED)\n"
        f"cudaq_realtime_add_dispatch_kernel(mod {' '.join(sources)})\n"
    )
    build = tmp_path / "build"
    env = {**os.environ, "CUDACXX": str(nvcc)}
    for cmd in (
        [CMAKE, "-S", str(tmp_path), "-B", str(build), "-G", generator,
         f"-Dskbuild_cudaq_DIR={skbuild_cudaq.cmake_dir()}"],
        [CMAKE, "--build", str(build)],
    ):  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    module = next(build.glob("*mod.so"))
    from skbuild_cudaq.fatbin import read_relfatbin_sections

    containers = [c for s in read_relfatbin_sections(module) for c in s.containers]
    assert len(containers) == len(dirs)


@pytest.mark.parametrize("compiler", ["nvcc", "nvrtc"])
def test_a_compile_error_ends_with_one_line_naming_source_and_target(
    tmp_path: Path, nvcc: Path, compiler: str
) -> None:
    """The device compiler's diagnostics, then one ``skbuild-cudaq: error:`` line naming the
    source (relative to the project) and the target; ninja's FAILED command is the short
    steps runner, not nvcc's full command line with every flag of the target."""
    if CMAKE is None or shutil.which("ninja") is None:
        pytest.skip("cmake or ninja is not on PATH")
    if compiler == "nvrtc":
        from skbuild_cudaq.build import _nvrtc
        from skbuild_cudaq.errors import ToolchainError

        try:
            _nvrtc.find_nvrtc()
        except ToolchainError as exc:
            pytest.skip(f"no NVRTC in this environment: {exc}")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "k.cu").write_text(
        'extern "C" __global__ void k(int *out) { out[0] = not_declared_anywhere; }\n'
    )
    (tmp_path / "lib.c").write_text("int f(void) { return 0; }\n")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(broken LANGUAGES C)\n"
        "add_library(mod MODULE lib.c)\nfind_package(skbuild_cudaq CONFIG REQUIRED)\n"
        "target_include_directories(mod PRIVATE "
        + " ".join(f"{tmp_path}/include{i}" for i in range(20))
        + ")\ncudaq_realtime_add_dispatch_kernel(mod src/k.cu)\n"
    )
    build = tmp_path / "build"
    env = {**os.environ, "CUDACXX": str(nvcc)}
    proc = subprocess.run(
        [CMAKE, "-S", str(tmp_path), "-B", str(build), "-G", "Ninja",
         f"-Dskbuild_cudaq_DIR={skbuild_cudaq.cmake_dir()}",
         f"-DSKBUILD_CUDAQ_COMPILER={compiler}", f"-DSKBUILD_CUDAQ_PYTHON={sys.executable}"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run(
        [CMAKE, "--build", str(build)], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode != 0
    log = proc.stdout + proc.stderr
    lines = log.splitlines()
    assert any('identifier "not_declared_anywhere" is undefined' in line for line in lines), log
    errors = [line for line in lines if line.startswith("skbuild-cudaq: error:")]
    name = "nvcc" if compiler == "nvcc" else "NVRTC 13."
    assert len(errors) == 1, log
    assert errors[0].startswith(f"skbuild-cudaq: error: {name}"), errors
    assert "could not compile src/k.cu for CMake target mod" in errors[0], errors
    assert errors[0].endswith("its diagnostics are above"), errors
    # the diagnostics come before the line, and ninja's command is short
    diagnostic = next(i for i, line in enumerate(lines) if "not_declared_anywhere" in line)
    assert diagnostic < lines.index(errors[0])
    failed = lines.index(next(line for line in lines if line.startswith("FAILED: ")))
    command = lines[failed + 1]
    assert "_run_device_compile.py" in command and "-gencode" not in command, command
    assert "include19" not in command and len(command) < 1000, command


USAGE = "The command takes <target> <file.cu>... [ARCHITECTURES <arch>...]."


@pytest.mark.parametrize(
    ("command", "word"),
    [
        ("cudaq_realtime_add_dispatch_kernel", "ARCHITECTURE"),
        ("cudaq_realtime_add_dispatch_kernel", "architectures"),
        ("cudaq_realtime_add_device_sources", "ARCHITECTRUES"),
        ("cudaq_realtime_add_handlers", "Architectures"),
    ],
)
def test_misspelt_keyword_suggests_architectures(tmp_path: Path, command: str, word: str) -> None:
    """A keyword slip is named as a keyword, not as a missing source file."""
    stderr = configure(tmp_path, f"{command}(mod k.cu {word} 90)\n")
    expect(stderr, f'skbuild-cudaq: {command}(mod): unknown keyword "{word}"; did you mean '
                   f"ARCHITECTURES? {USAGE}")  # fmt: skip
    assert "does not exist" not in stderr


def test_unknown_keyword_names_the_only_one(tmp_path: Path) -> None:
    stderr = configure(tmp_path, "cudaq_realtime_add_dispatch_kernel(mod SOURCES k.cu)\n")
    expect(stderr, 'unknown keyword "SOURCES"; the only keyword is ARCHITECTURES. ' + USAGE)


def test_a_file_named_in_capitals_is_still_a_source(tmp_path: Path) -> None:
    """Only a word that is no existing file reads as a keyword."""
    (tmp_path / "KERNEL").write_text('extern "C" __global__ void k() {}\n')
    stderr = configure(tmp_path, "cudaq_realtime_add_dispatch_kernel(mod KERNEL)\n")
    assert "keyword" not in stderr
    expect(stderr, "the project enables neither C nor CXX")


def test_architectures_without_a_value_is_refused(tmp_path: Path) -> None:
    stderr = configure(
        tmp_path, "cudaq_realtime_add_dispatch_kernel(mod k.cu ARCHITECTURES ${UNSET_VARIABLE})\n"
    )
    expect(stderr, "skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(mod): ARCHITECTURES is "
                   "given no architecture. Name at least one (80, 90, ...), or leave the keyword "
                   "out for the default (80).")  # fmt: skip


def test_sources_after_architectures_are_named(tmp_path: Path) -> None:
    stderr = configure(tmp_path, "cudaq_realtime_add_dispatch_kernel(mod ARCHITECTURES 90 k.cu)\n")
    expect(stderr, 'skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(mod): "k.cu" follows '
                   "ARCHITECTURES, which takes architectures only; sources come first: <target> "
                   "<file.cu>... [ARCHITECTURES <arch>...].")  # fmt: skip


def test_generator_expression_as_a_source_is_named(tmp_path: Path) -> None:
    stderr = configure(
        tmp_path, "cudaq_realtime_add_dispatch_kernel(mod $<$<CONFIG:Debug>:k.cu>)\n"
    )
    expect(stderr, "skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(mod): source "
                   '"$<$<CONFIG:Debug>:k.cu>" is a generator expression')  # fmt: skip
    assert "rename the file" not in stderr


def test_skip_device_link_takes_only_the_target(tmp_path: Path) -> None:
    stderr = configure(tmp_path, "cudaq_realtime_target_skip_device_link(mod ON)\n")
    expect(stderr, "skbuild-cudaq: cudaq_realtime_target_skip_device_link(mod): takes one "
                   'argument, the target; remove "ON" (one call per target).')  # fmt: skip


def test_cmake_older_than_the_documented_minimum_is_refused(tmp_path: Path) -> None:
    """The docs state CMake >= 3.25 (README, getting started, the CMake reference): an older
    CMake stops at find_package, naming the setting that fetches a newer one. (CMake 3.20
    configured, but its find_program caches what NO_CACHE asks not to.) CMAKE_VERSION is set
    as a variable here: the check reads it like any other."""
    if CMAKE is None:
        pytest.skip("cmake not on PATH")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(old LANGUAGES NONE)\n"
        "set(CMAKE_VERSION 3.24.3)\nfind_package(skbuild_cudaq CONFIG REQUIRED)\n"
    )
    proc = subprocess.run(
        [CMAKE, "-S", str(tmp_path), "-B", str(tmp_path / "build"),
         f"-Dskbuild_cudaq_DIR={skbuild_cudaq.cmake_dir()}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    expect(" ".join(proc.stderr.split()),
           'skbuild_cudaq needs CMake >= 3.25 (found 3.24.3). Set `cmake.version = ">=3.25"` in '
           "[tool.scikit-build] of pyproject.toml (scikit-build-core then fetches a newer cmake), "
           "or run a newer CMake (`pip install cmake`).")  # fmt: skip
    docs = Path(__file__).parents[1] / "docs"
    for page in (docs / "getting-started.md", docs.parent / "README.md"):
        assert "CMake ≥ 3.25" in page.read_text(), page


def test_the_compiler_environment_variable_is_the_cmake_default(tmp_path: Path) -> None:
    """A plain CMake configure takes $SKBUILD_CUDAQ_COMPILER as its device compiler choice
    (issue 56: how a machine with a toolkit builds as a runner without one), checked there."""
    env = {**os.environ, "SKBUILD_CUDAQ_COMPILER": "nvrtx"}
    stderr = configure(tmp_path, "cudaq_realtime_add_dispatch_kernel(mod k.cu)\n", env)
    expect(
        stderr, 'SKBUILD_CUDAQ_COMPILER="nvrtx" is not a device compiler; use auto, nvcc or nvrtc.'
    )
