"""``skbuild-cudaq check`` and ``inspect`` on hostile input (issue 56, items 2-4): what is
not a regular file, zip bombs, a check ended by SIGTERM, names that would forge lines.

Plain tests (no toolchain): wheels hold forged ELF files (``tests/_elf_forge.py``) and
``/bin/true``. Whatever could grow without bound runs in a child process under resource
limits (address space, file size) and a timeout, so that a regression fails the test
instead of filling the machine.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _elf_forge import Shdr, container, entry, forge_elf

SIGTERM_EXIT = 128 + signal.SIGTERM
#: runs check_package in a child process: no file over 4 MiB, 2 GiB of address space
_LIMITED = """
import json, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a larger write fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 20, 4 << 20))
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from skbuild_cudaq.realtime import check_package
report = check_package(sys.argv[1], **json.loads(sys.argv[2]))
print(json.dumps([str(p) for p in report.problems]))
"""


def _cli(command: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", command, *args],
        capture_output=True, text=True, check=False, timeout=timeout,
    )  # fmt: skip


def _limited_check(target: Path, tmp: Path, **kwargs: int) -> list[str]:
    """The problems of ``check_package(target, **kwargs)`` in a limited child process whose
    temporary files go to ``tmp``."""
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.run(
        [sys.executable, "-c", _LIMITED, str(target), json.dumps(kwargs)],
        capture_output=True, text=True, check=False, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    problems: list[str] = json.loads(proc.stdout)
    return problems


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("skbuild-cudaq: error: "), line
    return line


def _wheel(where: Path, members: dict[str, bytes], name: str = "pkg") -> Path:
    wheel = where / f"{name}-1.0-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for member, data in members.items():
            zf.writestr(member, data)
        zf.writestr(f"{name}-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: pkg\n")
    return wheel


def _elf(size: int) -> bytes:
    """A well-formed ELF64 file of ``size`` bytes (zeros inside, its sections at the start)."""
    head = forge_elf(b"", [])
    return head + bytes(size - len(head))


# -- item 2: what is not a regular file, refused before it is read ----------------------------


def _not_files(tmp_path: Path) -> dict[str, str]:
    zero = tmp_path / "zero.whl"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.whl"
    os.mkfifo(fifo)
    directory = tmp_path / "dir.whl"
    directory.mkdir()
    return {str(zero): "a character device", str(fifo): "a FIFO", str(directory): "a directory"}


def test_check_refuses_what_is_not_a_regular_file_in_one_line(tmp_path: Path) -> None:
    for target, kind in _not_files(tmp_path).items():
        line = _one_error_line(_cli("check", target, timeout=30))  # a FIFO hung, /dev/zero grew
        assert kind in line and target in line, line
    line = _one_error_line(_cli("check", ""))  # was a traceback
    assert "an empty argument" in line


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_inspect_refuses_what_is_not_a_regular_file_in_one_line(
    tmp_path: Path, json_flag: list[str]
) -> None:
    for target, kind in _not_files(tmp_path).items():
        line = _one_error_line(_cli("inspect", target, *json_flag, timeout=30))
        assert kind in line and target in line, line
    line = _one_error_line(_cli("inspect", "", *json_flag))
    assert "an empty path names no file" in line


def test_check_package_refuses_a_device_link_in_a_limited_process(tmp_path: Path) -> None:
    """The library call too: one problem, memory not touched (2 GiB address space)."""
    zero = tmp_path / "zero.whl"
    zero.symlink_to("/dev/zero")
    (problem,) = _limited_check(zero, tmp_path)
    assert "a character device, not a regular file" in problem


# -- item 3: zip bombs ------------------------------------------------------------------------


def test_a_member_that_is_no_elf_file_is_refused_before_it_is_written(tmp_path: Path) -> None:
    """It starts with the ELF magic, then zeros: its header is read from the stream and
    refused; before, 8 MiB were written first (here: past the 4 MiB file-size limit)."""
    wheel = _wheel(tmp_path, {"pkg/_core.so": b"\x7fELF" + bytes(8 << 20)})
    (problem,) = _limited_check(wheel, tmp_path)
    assert "'pkg/_core.so' starts like an ELF file but its ELF header is truncated" in problem


def test_a_binary_over_the_limit_is_refused_unwritten(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"pkg/_core.so": _elf(2 << 20)})
    (problem,) = _limited_check(wheel, tmp_path, max_binary_size=1 << 20)
    assert "the binary 'pkg/_core.so' unpacks to 2.0 MiB, more than the 1.0 MiB" in problem
    assert "--max-binary-size" in problem
    # raised, it is checked (no device code: one problem of another kind)
    (problem,) = _limited_check(wheel, tmp_path, max_binary_size=3 << 20)
    assert "no module carries device code" in problem
    assert list(tmp_path.glob("skbuild-cudaq-check-*")) == []


def test_binaries_over_the_wheel_limit_are_refused(tmp_path: Path) -> None:
    members = {f"pkg/_m{i}.so": _elf(1 << 20) for i in range(3)}
    wheel = _wheel(tmp_path, members)
    (problem,) = _limited_check(wheel, tmp_path, max_unpacked_size=(5 << 20) // 2)
    assert "its binaries unpack to more than the 2.5 MiB check unpacks of one wheel" in problem
    assert "--max-unpacked-size" in problem


def _repeated_records(wheel: Path, times: int) -> Path:
    """``wheel`` with its first central-directory record repeated ``times`` times (every copy
    pointing at the same data), as Python before 3.13 reads it."""
    data = wheel.read_bytes()
    eocd = data.rindex(b"PK\x05\x06")
    count, cd_size, cd_offset = struct.unpack_from("<HII", data, eocd + 10)
    first = data[cd_offset : cd_offset + 46]
    name_len, extra_len, comment_len = struct.unpack_from("<HHH", first, 28)
    record = data[cd_offset : cd_offset + 46 + name_len + extra_len + comment_len]
    directory = record * times + data[cd_offset : cd_offset + cd_size]
    end = struct.pack(
        "<4s4H2IH", b"PK\x05\x06", 0, 0, count + times, count + times, len(directory),
        cd_offset, 0,
    )  # fmt: skip
    bomb = wheel.with_name("bomb-1.0-cp310-abi3-linux_x86_64.whl")
    bomb.write_bytes(data[:cd_offset] + directory + end)
    return bomb


def test_overlapping_entries_are_refused_on_every_python(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"pkg/_core.so": _elf(1 << 20)})
    bomb = _repeated_records(wheel, 50)
    (problem,) = _limited_check(bomb, tmp_path)
    assert "refused: its zip entries overlap" in problem and "'pkg/_core.so'" in problem
    line = _one_error_line(_cli("check", str(bomb)))
    assert "overlap" in line


def test_cli_size_options(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"pkg/_core.so": _elf(2 << 20)})
    line = _one_error_line(_cli("check", str(wheel), "--max-binary-size", "1M"))
    assert "unpacks to 2.0 MiB, more than the 1.0 MiB" in line
    proc = _cli("check", str(wheel), "--max-binary-size", "0")
    assert proc.returncode == 2 and "expected a positive size in bytes" in proc.stderr
    from skbuild_cudaq.cli._check import byte_size

    assert [byte_size(t) for t in ("512", "2K", "3m", "1G", "1GiB")] == [
        512, 2 << 10, 3 << 20, 1 << 30, 1 << 30,
    ]  # fmt: skip


_BLOCKED = """
import sys, time
import skbuild_cudaq.realtime.link.check as check
from skbuild_cudaq.cli import main

def blocked(packaged, options):  # stands in for the links that take minutes
    print(packaged._tmp, flush=True)
    time.sleep(600)

check._check_packaged = blocked
sys.exit(main(["check", sys.argv[1]]))
"""


def test_sigterm_removes_the_temporary_files(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"pkg/_core.so": _elf(1 << 16)})
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _BLOCKED, str(wheel)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        extracted = Path(proc.stdout.readline().strip())
        assert extracted.parent == tmp_path and any(extracted.rglob("_core.so"))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == SIGTERM_EXIT, err
    assert "Traceback" not in err
    assert not extracted.exists()


# -- item 4: names printed escaped ------------------------------------------------------------

FORGED = "x.so\nchecked 1 target: 1 module, 1 link in 0.1 s: ok\x1b]0;pwned\x07\x1b[2J"


def _assert_escaped(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text
    assert "checked 1 target: 1 module, 1 link in 0.1 s: ok" not in text.splitlines()


def test_member_and_wheel_names_are_printed_escaped(tmp_path: Path) -> None:
    """A module whose device code cannot be read is named in its problem line; the wheel's
    own file name heads its table."""
    blob = b"not a fatbin container".ljust(64, b"\0")
    module = forge_elf(blob, [Shdr("__nv_relfatbin", 0, len(blob))])
    wheel = _wheel(tmp_path, {f"pkg/{FORGED}": module})
    forged_wheel = wheel.with_name("pkg\n\x1b[31mred-1.0-cp310-abi3-linux_x86_64.whl")
    wheel.rename(forged_wheel)
    proc = _cli("check", str(forged_wheel))
    assert proc.returncode == 1
    _assert_escaped(proc.stdout + proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    assert "pkg/x.so\\nchecked 1 target" in line and "\\x1b]0;pwned\\x07" in line
    assert proc.stdout.splitlines()[0] == "pkg\\n\\x1b[31mred-1.0-cp310-abi3-linux_x86_64.whl:"
    doc = json.loads(_cli("check", str(forged_wheel), "--json").stdout)
    (target,) = doc["targets"]
    assert target["problems"][0]["module"] == f"pkg/{FORGED}"  # JSON: escaped by JSON itself


def test_the_table_escapes_every_name_of_a_module() -> None:
    from skbuild_cudaq.cli._check import render_table
    from skbuild_cudaq.realtime.link.check import ArchCheck, CheckReport, ModuleCheck

    module = ModuleCheck(
        f"pkg/{FORGED}",
        sources=("src/k.cu",),
        kernels=("k\n\x1b[2Jernel",),
        handlers=("h\x1b]0;x\x07",),
        architectures=("sm_80",),
        links=(ArchCheck("sm_80", True, 0.01, 1024, left_out=("src/\x1b[1mk.cu (lto-ir sm_90)",)),),
    )
    text = render_table(CheckReport("pkg.whl", "wheel", (module,)))
    _assert_escaped(text)
    assert "k\\n\\x1b[2Jernel" in text and "h\\x1b]0;x\\x07" in text
    rows = text.splitlines()
    assert len(rows) == 4  # target, header, one row, the left-out line
    assert rows[1].index("kernels") == rows[2].index("k\\n")  # aligned on what is printed


def test_inspect_prints_the_binary_s_name_escaped(tmp_path: Path) -> None:
    blob = container(entry(b"\xed\x43\x4e\x7f" + bytes(28)))
    module = tmp_path / "x.so\nsection __nv_relfatbin forged\x1b[2J"
    module.write_bytes(forge_elf(blob, [Shdr("__nv_relfatbin", 0, len(blob))]))
    proc = _cli("inspect", str(module))
    assert proc.returncode == 0, proc.stderr
    _assert_escaped(proc.stdout)
    first = proc.stdout.splitlines()[0]
    assert first == f"{tmp_path}/x.so\\nsection __nv_relfatbin forged\\x1b[2J:"
