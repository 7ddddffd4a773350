"""``skbuild-cudaq check`` and ``check_package`` (wheels and installed distributions).

Plain tests: targets that are not wheels, wheels without device code, the table, the
program name. ``toolchain`` tests (nvcc, gcc, nvJitLink; no GPU): modules built the way the
build builds them -- each source side-compiled to an LTO-IR fatbin with nvcc's ``fatbin`` and
``ptx`` recipes, a build record from the PTX, both embedded by the shared embed core's
generated C (:mod:`skbuild_cudaq.build._embed`) -- packed into wheels, then a good wheel, a
module that lost ``__nv_relfatbin`` (``objcopy --remove-section``, what a careless repair
step does), one that lost one container, an architecture that does not link, a module that
does not link at all, and records that declare what the code lacks. Wheels from ``pip
wheel``, ``python -m build``, ``auditwheel repair`` and installed distributions are checked
in ``tests/test_integration_build.py``; a downstream CI run in ``tests/test_ci_recipe.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from _json_keys import assert_documented

from skbuild_cudaq.build import _device_info, _embed
from skbuild_cudaq.cli import program_name

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "gpu_kernels"
SCRIPT = Path(sys.executable).parent / "skbuild-cudaq"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "check", *args],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip


def make_wheel(where: Path, members: dict[str, bytes], name: str = "pkg") -> Path:
    """A wheel file holding ``members`` (path -> bytes) and a minimal ``.dist-info``."""
    wheel = where / f"{name}-1.0-cp310-abi3-linux_x86_64.whl"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in members.items():
            zf.writestr(path, data)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
        record = "".join(f"{p},,\n" for p in [*members, f"{info}/METADATA", f"{info}/WHEEL"])
        zf.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return wheel


# ---------------------------------------------------------------------------------------------
# Plain: what is not a wheel with device code
# ---------------------------------------------------------------------------------------------


def test_a_missing_file_and_an_unknown_distribution_are_one_line_each(tmp_path: Path) -> None:
    from skbuild_cudaq.realtime import check_package

    report = check_package(tmp_path / "nope.whl")
    assert not report.ok and report.kind == "unknown"
    (problem,) = report.problems
    assert (problem.kind, str(problem)) == ("not-found", f"{tmp_path / 'nope.whl'}: no such file")
    report = check_package("no-such-distribution-here", path=[str(tmp_path)])
    (problem,) = report.problems
    assert problem.kind == "not-found"
    assert "neither a wheel file nor an installed distribution" in str(problem)
    (tmp_path / "text.whl").write_text("not a zip")
    (problem,) = check_package(tmp_path / "text.whl").problems
    assert str(problem).startswith(f"{tmp_path / 'text.whl'}: not a wheel (cannot read it as a zip")


def test_a_wheel_without_device_code_fails(tmp_path: Path) -> None:
    """A host-only binary (this Python) is listed as such; no module with device code is an
    error: a check of a wheel that should carry dispatch kernels must not pass on none."""
    from skbuild_cudaq.realtime import check_package

    host = Path(sys.executable).resolve().read_bytes()
    wheel = make_wheel(tmp_path, {"pkg/__init__.py": b"", "pkg/tool": host})
    report = check_package(wheel)
    assert report.kind == "wheel" and report.modules == ()
    assert report.other_binaries == ("pkg/tool",)
    (problem,) = report.problems
    assert problem.kind == "no-device-code"
    assert str(problem).startswith(f"{wheel.name}: no module carries device code (1 binaries")


def test_member_names_never_become_paths_outside_the_extraction(tmp_path: Path) -> None:
    from skbuild_cudaq.realtime.link._packaged import open_wheel

    host = Path(sys.executable).resolve().read_bytes()
    members = {"../../evil.so": host, "pkg/..": host, "pkg/ok.so": host}
    wheel = make_wheel(tmp_path, members)
    with open_wheel(wheel) as packaged:
        names = [b.name for b in packaged.binaries]
        paths = [b.path for b in packaged.binaries]
        root = paths[0].parent.parent
        assert names == ["../../evil.so", "pkg/..", "pkg/ok.so"]
        assert all(p.parent.parent == root and p.is_file() for p in paths)
        assert [p.name for p in paths] == ["evil.so", "binary", "ok.so"]
    assert not root.exists()  # removed on close
    assert not (tmp_path.parent / "evil.so").exists()


def test_cli_missing_wheel_is_one_error_line_and_exit_1(tmp_path: Path) -> None:
    proc = run_cli(str(tmp_path / "gone.whl"))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"skbuild-cudaq: error: {tmp_path}/gone.whl: no such file"]
    assert "checked 1 target: 0 modules, 0 links" in proc.stdout


def test_program_name_follows_how_it_was_run() -> None:
    assert program_name("/x/site-packages/skbuild_cudaq/__main__.py") == "python -m skbuild_cudaq"
    assert program_name("/venv/bin/skbuild-cudaq") == "skbuild-cudaq"
    if not SCRIPT.is_file():
        pytest.skip(f"no {SCRIPT} (skbuild-cudaq is not installed in this environment)")
    proc = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, check=True)
    assert proc.stdout.startswith("usage: skbuild-cudaq "), proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "--help"], capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    assert proc.stdout.startswith("usage: python -m skbuild_cudaq "), proc.stdout


def test_table_lists_every_kernel_handler_and_architecture() -> None:
    from skbuild_cudaq.cli._check import render_table
    from skbuild_cudaq.realtime.link.check import ArchCheck, CheckReport, ModuleCheck

    module = ModuleCheck(
        "pkg/_core.so",
        kernels=("k_one", "k_two"),
        handlers=("h",),
        architectures=("sm_80", "sm_90", "sm_100"),
        containers=3,
        unnamed=1,
        links=(
            ArchCheck("sm_80", True, 0.0213, 40960, left_out=("src/cluster.cu (lto-ir sm_90)",)),
            ArchCheck("sm_90", False),
            ArchCheck("sm_100", False, 0.03, 1024),
        ),
    )
    text = render_table(CheckReport("pkg.whl", "wheel", (module,), ("pkg.libs/x.so",)))
    assert text.splitlines() == [
        "pkg.whl:",
        "  module        kernels                 handlers  arch    link                cubin",
        "  pkg/_core.so  k_one                   h         sm_80   21 ms               40.0 KiB",
        "                k_two                             sm_90   FAILED              -",
        "                (+1 unnamed container)            sm_100  30 ms (incomplete)  1.0 KiB",
        "  pkg/_core.so for sm_80: left out src/cluster.cu (lto-ir sm_90) (no code for sm_80: "
        "what it defines is unavailable on those GPUs)",
        "  (1 binary without device code)",
    ]


# ---------------------------------------------------------------------------------------------
# Toolchain: modules built the way the build builds them
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    file: Path
    archs: tuple[str, ...] = ("80",)
    embed: bool = True  #: False: the record is embedded, the fatbin not (a lost container)
    #: edits of the record (as if the build had declared more than the code has)
    record: Callable[[dict[str, object]], None] | None = None


class ModuleMaker:
    """Builds ``<name>.so`` from side-compiled sources with records (nvcc + gcc), cached."""

    def __init__(self, nvcc: Path, root: Path) -> None:
        self.nvcc, self.root = nvcc, root
        self.gcc = shutil.which("gcc") or shutil.which("cc")

    def fatbin(self, source: Source) -> tuple[Path, Path]:
        stem = f"{source.file.stem}-{'-'.join(source.archs)}"
        fatbin, ptx = self.root / f"{stem}.fatbin", self.root / f"{stem}.ptx"
        if not fatbin.is_file():
            flags = _embed.CompileFlags(include_dirs=(str(HERE / "include"),))  # cudaq_test/
            for command, out in (
                (_embed.fatbin_command(self.nvcc, source.file, fatbin,
                                       architectures=source.archs, flags=flags), fatbin),
                (_embed.ptx_command(self.nvcc, source.file, ptx,
                                    architecture=source.archs[0], flags=flags), ptx),
            ):  # fmt: skip
                _embed.run_compile(command, out, f"nvcc {source.file.name}", cwd=source.file.parent)
        return fatbin, ptx

    def module(self, name: str, sources: Sequence[Source]) -> Path:
        if self.gcc is None:
            pytest.skip("no C compiler (gcc)")
        work = self.root / name
        work.mkdir()
        fatbins, records = [], []
        for index, source in enumerate(sources):
            fatbin, ptx = self.fatbin(source)
            kernels, handlers = _device_info.names_from_ptx(ptx.read_text())
            record = _device_info.make_record(
                source=source.file, project_dir=HERE, compiled="side",
                compiler=_device_info.nvcc_compiler(self.nvcc), architectures=source.archs,
                kernels=kernels, handlers=handlers,
                containers=[c.data for c in _read_fatbin(fatbin)],
            )  # fmt: skip
            if source.record is not None:
                source.record(record)
            json_path = work / f"record-{index}.json"
            _device_info.write_record(json_path, record)
            records.append(json_path)
            if source.embed:
                fatbins.append(fatbin)
        c_file = work / "embed.c"
        c_file.write_text(_embed.embed_c_source(fatbins, records=records))
        out = work / f"{name}.so"
        subprocess.run(
            [self.gcc, "-shared", "-fPIC", "-o", str(out), str(c_file)],
            check=True, capture_output=True,
        )  # fmt: skip
        return out


def _read_fatbin(path: Path) -> tuple[object, ...]:
    from skbuild_cudaq.fatbin import read_fatbin_file

    return read_fatbin_file(path)


@pytest.fixture(scope="module")
def maker(nvcc: Path, tmp_path_factory: pytest.TempPathFactory) -> ModuleMaker:
    return ModuleMaker(nvcc, tmp_path_factory.mktemp("check-modules"))


DISPATCHER = Source(KERNELS / "single_thread_dispatcher.cu")
HANDLERS = Source(KERNELS / "handlers_a.cu")
LAUNCH_CHECKS_90 = Source(KERNELS / "launch_checks.cu", archs=("90",))


def wheel_of(module: Path, where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    return make_wheel(where, {"pkg/__init__.py": b"", f"pkg/{module.name}": module.read_bytes()})


@pytest.fixture(scope="module")
def good_wheel(maker: ModuleMaker) -> Path:
    module = maker.module("_good", [DISPATCHER, HANDLERS, Source(KERNELS / "handlers_b.cu")])
    return wheel_of(module, maker.root / "good")


@pytest.mark.toolchain
def test_good_wheel_names_every_kernel_handler_and_architecture(good_wheel: Path) -> None:
    from skbuild_cudaq.realtime import check_package

    report = check_package(good_wheel)
    assert report.ok, [str(p) for p in report.problems]
    (module,) = report.modules
    assert module.module == "pkg/_good.so"
    assert module.sources == (
        "gpu_kernels/single_thread_dispatcher.cu",
        "gpu_kernels/handlers_a.cu",
        "gpu_kernels/handlers_b.cu",
    )
    assert module.kernels == ("single_thread_dispatcher",)
    assert module.handlers == ("echo", "rpc_increment")
    assert (module.architectures, module.containers, module.unnamed) == (("sm_80",), 3, 0)
    (link,) = module.links
    assert link.ok and link.arch == "sm_80"
    assert link.seconds is not None and link.seconds > 0  # nvJitLink's own time, reported
    assert link.cubin_size is not None and link.cubin_size > 1000
    # the built-in kernel's builds are linked too
    builtin = {"", "_1024", "_shared"}
    assert set(link.kernels) == {
        "single_thread_dispatcher",
        *(f"cudaq_realtime_unified_dispatch{build}" for build in builtin),
    }
    assert set(link.handlers) >= {"echo", "rpc_increment"}


@pytest.mark.toolchain
def test_cli_prints_the_table_and_json_and_exits_0(good_wheel: Path) -> None:
    proc = run_cli(str(good_wheel))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{good_wheel.name}:"
    assert lines[1].split() == ["module", "kernels", "handlers", "arch", "link", "cubin"]
    first, second = lines[2].split(), lines[3].split()
    assert first[:5] == ["pkg/_good.so", "single_thread_dispatcher", "echo", "sm_80", *first[4:5]]
    assert first[5] == "ms" and first[7] == "KiB"
    assert second == ["rpc_increment"]
    assert lines[-1].startswith("checked 1 target: 1 module, 1 link in ") and "s: ok" in lines[-1]
    proc = run_cli("--json", "--arch", "sm_90", "--arch", "100", str(good_wheel))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1 and doc["ok"] is True
    assert_documented("check --json", doc)
    (target,) = doc["targets"]
    (module,) = target["modules"]
    assert module["architectures"] == ["sm_90", "sm_100"]
    assert [(link["arch"], link["ok"]) for link in module["links"]] == [
        ("sm_90", True), ("sm_100", True),
    ]  # fmt: skip
    assert all(link["cubin_size"] > 1000 for link in module["links"])


def test_the_json_document_has_the_documented_keys_at_every_level() -> None:
    """``check --json`` of a target with a module, a link and problems at both levels: its
    keys are those the command-line reference lists (and ``ok`` follows the problems)."""
    from skbuild_cudaq.cli._check import json_document
    from skbuild_cudaq.realtime.link.check import ArchCheck, CheckProblem, CheckReport, ModuleCheck

    link_problem = CheckProblem("link", "pkg-1.0.whl", "does not link", "pkg/_m.so", "sm_80", "x")
    module = ModuleCheck(
        "pkg/_m.so", ("k.cu",), ("k",), ("echo",), ("sm_80", "sm_90"), 1, 0,
        (ArchCheck("sm_80", False), ArchCheck("sm_90", True, 0.02, 4096, ("k",), ("echo",))),
        (link_problem,),
    )  # fmt: skip
    lost = CheckProblem("no-device-code", "other-1.0.whl", "no binary carries device code")
    reports = [
        CheckReport("pkg-1.0.whl", "wheel", (module,), ("pkg/_host.so",), (link_problem,)),
        CheckReport("other-1.0.whl", "wheel", problems=(lost,)),
    ]
    doc = json.loads(json_document(reports))
    assert doc["schema_version"] == 1 and doc["ok"] is False
    assert [t["ok"] for t in doc["targets"]] == [False, False]
    assert_documented("check --json", doc)
    assert json.loads(json_document(reports[:0]))["ok"] is True


@pytest.mark.toolchain
def test_a_module_that_lost_its_relfatbin_fails_in_one_line(
    good_wheel: Path, tmp_path: Path
) -> None:
    """``objcopy --remove-section __nv_relfatbin``: what a repair step that drops unknown
    sections does. The build records are still there and name what is gone."""
    objcopy = shutil.which("objcopy")
    if objcopy is None:
        pytest.skip("no objcopy")
    with zipfile.ZipFile(good_wheel) as zf:
        module = tmp_path / "_good.so"
        module.write_bytes(zf.read("pkg/_good.so"))
    subprocess.run([objcopy, "--remove-section", "__nv_relfatbin", str(module)], check=True)
    wheel = wheel_of(module, tmp_path / "stripped")
    proc = run_cli(str(wheel))
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith(
        f"skbuild-cudaq: error: {wheel.name}: pkg/_good.so: lost its device code: no "
        "__nv_relfatbin section, though its build recorded 3 sources "
        "(gpu_kernels/single_thread_dispatcher.cu, gpu_kernels/handlers_a.cu, "
        "gpu_kernels/handlers_b.cu)"
    ), line
    assert "Traceback" not in proc.stdout + proc.stderr
    # the table still shows what the module declared
    assert "single_thread_dispatcher" in proc.stdout and "sm_80" in proc.stdout


@pytest.mark.toolchain
def test_a_module_that_lost_one_container(maker: ModuleMaker, tmp_path: Path) -> None:
    from skbuild_cudaq.realtime import check_package

    lost = Source(KERNELS / "handlers_b.cu", embed=False)
    wheel = wheel_of(maker.module("_partial", [DISPATCHER, HANDLERS, lost]), tmp_path)
    report = check_package(wheel)
    (problem,) = report.problems
    assert problem.kind == "lost-device-code" and problem.module == "pkg/_partial.so"
    assert "lost the device code of gpu_kernels/handlers_b.cu" in str(problem)
    assert "\n" not in str(problem)


@pytest.mark.toolchain
def test_a_source_without_code_for_an_architecture_is_left_out(
    maker: ModuleMaker, tmp_path: Path
) -> None:
    """One source declared for sm_90 only: for sm_80 the module links without it, as the run
    time links it on an sm_80 GPU (listed, not a problem); its kernels are required only
    where it is linked. The module passes for both declared architectures."""
    from skbuild_cudaq.realtime import check_package

    wheel = wheel_of(maker.module("_mixed", [DISPATCHER, HANDLERS, LAUNCH_CHECKS_90]), tmp_path)
    report = check_package(wheel)
    assert report.ok, [str(p) for p in report.problems]
    (module,) = report.modules
    assert module.architectures == ("sm_80", "sm_90")
    assert set(module.kernels) == {"single_thread_dispatcher", "cluster_report", "grid_sync_report"}
    sm80, sm90 = module.links
    assert (sm80.arch, sm80.ok, sm90.arch, sm90.ok) == ("sm_80", True, "sm_90", True)
    assert sm80.left_out == ("gpu_kernels/launch_checks.cu (lto-ir sm_90)",)
    assert "cluster_report" not in sm80.kernels and "single_thread_dispatcher" in sm80.kernels
    assert sm90.left_out == () and "cluster_report" in sm90.kernels
    proc = run_cli(str(wheel))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert (
        "  pkg/_mixed.so for sm_80: left out gpu_kernels/launch_checks.cu (lto-ir sm_90) (no "
        "code for sm_80: what it defines is unavailable on those GPUs)"
    ) in proc.stdout.splitlines()
    assert proc.stdout.rstrip().endswith(": ok")
    doc = json.loads(run_cli("--json", str(wheel)).stdout)
    links = doc["targets"][0]["modules"][0]["links"]
    assert [link["left_out"] for link in links] == [
        ["gpu_kernels/launch_checks.cu (lto-ir sm_90)"], [],
    ]  # fmt: skip


@pytest.mark.toolchain
def test_an_architecture_no_source_has_code_for(maker: ModuleMaker, tmp_path: Path) -> None:
    """When no source of the module has code for an architecture (all sm_90 only, checked
    for sm_80), the link is refused as before: the line names the source and the setting."""
    from skbuild_cudaq.realtime import check_package

    wheel = wheel_of(maker.module("_only90", [LAUNCH_CHECKS_90]), tmp_path)
    report = check_package(wheel, architectures=["sm_80", "sm_90"])
    (module,) = report.modules
    assert [(link.arch, link.ok) for link in module.links] == [("sm_80", False), ("sm_90", True)]
    (problem,) = report.problems
    assert (problem.kind, problem.arch) == ("link", "sm_80")
    text = str(problem)
    assert text.startswith(f"{wheel.name}: pkg/_only90.so: does not link for sm_80: ")
    assert "gpu_kernels/launch_checks.cu (container _only90.so:" in text
    assert "has no code for sm_80 (lto-ir sm_90)" in text
    assert 'add "80" to its architectures' in text and "\n" not in text
    proc = run_cli("--arch", "sm_80", "--arch", "sm_90", str(wheel))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"skbuild-cudaq: error: {text}"]
    row = next(line for line in proc.stdout.splitlines() if " sm_80 " in line)
    assert "FAILED" in row


@pytest.mark.toolchain
def test_a_module_nvjitlink_refuses_is_one_line_with_its_log(
    maker: ModuleMaker, tmp_path: Path
) -> None:
    from skbuild_cudaq.realtime import check_package

    missing = Source(KERNELS / "missing_symbol.cu")
    wheel = wheel_of(maker.module("_missing", [DISPATCHER, missing]), tmp_path)
    (problem,) = check_package(wheel).problems
    assert (problem.kind, problem.arch) == ("link", "sm_80")
    assert "[ERROR_PTX_COMPILE]" in str(problem)
    assert "Unresolved extern function 'cudaq_test_missing_function'" in str(problem)
    assert "\n" not in str(problem) and str(tmp_path) not in str(problem)
    assert "cudaq_test_missing_function" in problem.log


def _declare(kernel: str = "", handler: str = "") -> Callable[[dict[str, object]], None]:
    def edit(record: dict[str, object]) -> None:
        if kernel:
            record["kernels"] = [*record["kernels"], kernel]  # type: ignore[misc]
        if handler:
            record["handlers"] = [*record["handlers"], handler]  # type: ignore[misc]

    return edit


@pytest.mark.toolchain
def test_declared_kernels_and_handlers_must_be_in_the_cubin(
    maker: ModuleMaker, tmp_path: Path
) -> None:
    """Records that declare more than the code has (a record from another build of the source,
    say): each missing name is a problem of its own."""
    from skbuild_cudaq.realtime import check_package

    dispatcher = Source(DISPATCHER.file, record=_declare(kernel="ghost_kernel"))
    handlers = Source(HANDLERS.file, record=_declare(handler="ghost_handler"))
    wheel = wheel_of(maker.module("_ghosts", [dispatcher, handlers]), tmp_path)
    report = check_package(wheel, architectures=["sm_90"])
    kinds = sorted((p.kind, p.arch) for p in report.problems)
    assert kinds == [("missing-handler", "sm_90"), ("missing-kernel", "sm_90")]
    text = "\n".join(str(p) for p in report.problems)
    assert (
        "kernel ghost_kernel (declared by its build record) is not a kernel of the module" in text
    )
    assert "handler ghost_handler (exported, by its build record) does not resolve" in text
    (module,) = report.modules
    assert not module.links[0].ok and module.links[0].cubin_size


@pytest.mark.toolchain
def test_an_installed_distribution_is_checked_in_place(good_wheel: Path, tmp_path: Path) -> None:
    from skbuild_cudaq.realtime import check_package

    site = tmp_path / "site"
    with zipfile.ZipFile(good_wheel) as zf:
        zf.extractall(site)
    report = check_package("pkg", path=[str(site)])
    assert report.ok, [str(p) for p in report.problems]
    assert (report.kind, report.target) == ("distribution", "pkg 1.0 (installed)")
    assert [m.module for m in report.modules] == ["pkg/_good.so"]


@pytest.mark.toolchain
def test_link_cli_names_the_source_and_speaks_architectures(
    maker: ModuleMaker, tmp_path: Path
) -> None:
    """The CLI ``link`` of a module with build records: a source without code for the
    architecture is left out, named as ``inspect`` names it; when no source has code for it,
    the error names the source and the pyproject setting (``architectures``); below sm_80 it
    says the floor instead of advising a rebuild."""
    mixed = maker.module("_linkcli", [DISPATCHER, HANDLERS, LAUNCH_CHECKS_90])
    only90 = maker.module("_linkcli90", [LAUNCH_CHECKS_90])

    def link(module: Path, arch: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "skbuild_cudaq", "link", str(module), "--arch", arch,
             "-o", str(tmp_path / "out.cubin")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip

    proc = link(mixed, "sm_80")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "skbuild-cudaq: left out (no code for sm_80): gpu_kernels/launch_checks.cu "
        "(lto-ir sm_90); what it defines is not in the cubin"
    )
    proc = link(only90, "sm_80")
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith(
        "skbuild-cudaq: error: cannot link _linkcli90.so for sm_80: gpu_kernels/launch_checks.cu "
        "(container _linkcli90.so:"
    ), line
    assert 'Link for sm_90 or newer, or rebuild it for sm_80: add "80" to its architectures' in line
    assert "ARCHITECTURES)" in line and "rebuild with an older" not in line
    proc = link(mixed, "sm_75")
    (line,) = proc.stderr.splitlines()
    assert "skbuild-cudaq serves GPUs of sm_80 and newer" in line and "floor" in line
    assert "architectures" not in line
    proc = link(mixed, "sm_90")
    assert proc.returncode == 0 and "left out" not in proc.stderr


@pytest.mark.toolchain
def test_check_opens_each_binary_once(
    maker: ModuleMaker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its sections (device code and build records) are read in one pass over the file."""
    from skbuild_cudaq.realtime import check_package

    wheel = wheel_of(maker.module("_once", [DISPATCHER, HANDLERS]), tmp_path)
    from skbuild_cudaq import _elf

    opened: list[str] = []
    real_open = _elf.open_regular  # every reader of an ELF file opens it through this

    def counting_open(path: Path | str) -> object:
        if Path(path).name.startswith("_once"):
            opened.append(str(path))
        return real_open(path)

    monkeypatch.setattr(_elf, "open_regular", counting_open)
    report = check_package(wheel, architectures=["sm_90"])
    assert report.ok, [str(p) for p in report.problems]
    assert len(opened) == 1, opened
