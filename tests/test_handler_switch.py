"""The handler switch's generator (skbuild_cudaq.build._handler_switch): pure Python.

That the generated source compiles, links and serves is checked where it is built:
tests/test_integration_build.py (wheels of example_app, plain_backend, handler_switch) and
on the GPU (test_handler_switch_serves_seen_and_unseen_handlers, every dispatcher test).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from skbuild_cudaq.build import _handler_switch as hs


def test_exports_are_lines_that_start_with_the_macro() -> None:
    text = """
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(first);
  CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION( second ) ;
\tCUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(first);
// CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(commented_out);
int x; CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(not_at_line_start);
#define MINE(n) CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(n)
MINE(through_a_macro);
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(_under_score9);
CUDAQ_REALTIME_EXPORT_OTHER_FUNCTION(not_an_export);
"""
    assert hs.exported_handlers(text, shape="any") == ["first", "second", "_under_score9"]
    # the switch calls the thread-shaped ones; launch-wide ones go through the pointer
    assert hs.exported_handlers(text) == ["second"]
    assert hs.exported_handlers(text, shape="launch") == ["first", "_under_score9"]


def _switch_body(text: str, hook: str) -> str:
    """The body of the generated definition of ``hook``."""
    start = text.index(f"__device__ int {hook}(")
    return text[start : text.index("\n}\n", start) + 3]


def test_switch_source_calls_each_export_through_its_global_weakly() -> None:
    text = hs.switch_source(
        "_core",
        [("src/a.cu", ["echo", "add"]), ("src/b.cu", ["add", "rev"])],
        [("src/a.cu", ["wide"]), ("src/b.cu", ["sum", "wide"])],
    )
    calls = r"^    return cudaq_detail_call_direct\(cudaq_handler_(\w+), args,"
    thread = _switch_body(text, "cudaq_dev_call_handler")
    launch = _switch_body(text, "cudaq_dev_call_launch_handler")
    # each hook calls the exports of its shape, once each, in order
    assert re.findall(calls, thread, flags=re.MULTILINE) == ["echo", "add", "rev"]
    assert re.findall(calls, launch, flags=re.MULTILINE) == ["wide", "sum"]
    for name in ("echo", "add", "rev", "wide", "sum"):
        # weak: the attribute under nvcc, the pragma under NVRTC (whose verifier rejects
        # the attribute's form: tests/test_nvrtc.py builds a switch with it)
        decl = (
            "#ifdef __CUDACC_RTC__\n"
            f"extern __device__ const cudaq_device_handler_t cudaq_handler_{name};\n"
            f"#pragma weak cudaq_handler_{name}\n"
            "#else\n"
            "extern __device__ __attribute__((weak)) const cudaq_device_handler_t "
            f"cudaq_handler_{name};\n"
            "#endif\n"
        )
        assert text.count(decl) == 1
        body = launch if name in ("wide", "sum") else thread
        test = f"if (&cudaq_handler_{name} != nullptr && handler == cudaq_handler_{name})"
        assert text.count(test) == 1 and test in body
    assert " *   src/a.cu: echo, add\n" in text
    assert " *   src/b.cu: add, rev\n" in text
    assert " *   src/b.cu: sum, wide\n" in text
    assert "#include <cudaq/realtime/unified_dispatch_device.cuh>" in text
    # any other address: the pointer; every call with a length of its own
    pointer = (
        "  return cudaq_detail_call_direct(handler, args, arg_len, result, max_result_len, "
        "result_len);\n}"
    )
    assert pointer in thread and pointer in launch


def test_switch_without_exports_is_the_pointer_alone() -> None:
    text = hs.switch_source("t", [("src/kernel.cu", [])])
    assert "cudaq_handler_" not in text.split('extern "C"', 1)[1]
    assert "(no source exports a thread-shaped handler)" in text
    assert "(no source exports a launch-wide handler)" in text
    # both hooks are still defined: the switch replaces both default forms
    for hook in ("cudaq_dev_call_handler", "cudaq_dev_call_launch_handler"):
        assert "return cudaq_detail_call_direct(handler, " in _switch_body(text, hook)


def test_comment_cannot_be_closed_by_a_path() -> None:
    text = hs.switch_source("a*/b", [("dir*/x.cu", ["h"])])
    head = text.split("*/", 1)[0]
    assert "#include" not in head and "dir* /x.cu" in head and "a* /b" in head


def test_write_switch_writes_only_when_the_text_changes(tmp_path: Path) -> None:
    src = tmp_path / "project" / "src" / "h.cu"
    src.parent.mkdir(parents=True)
    src.write_text(
        "CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(one);\nCUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(wide);\n"
    )
    out = tmp_path / "build" / "cudaq_realtime" / "mod" / hs.SWITCH_FILE
    assert hs.write_switch(out, "mod", [src, src], tmp_path / "project") == 2
    assert " *   src/h.cu: one\n" in out.read_text()  # relative to the project
    assert " *   src/h.cu: wide\n" in out.read_text()
    launch = _switch_body(out.read_text(), "cudaq_dev_call_launch_handler")
    assert "cudaq_detail_call_direct(cudaq_handler_wide, " in launch
    stamp = out.stat().st_mtime_ns
    hs.write_switch(out, "mod", [src], tmp_path / "project")
    assert out.stat().st_mtime_ns == stamp
    src.write_text(
        "CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(one);\nCUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(two);\n"
    )
    assert hs.write_switch(out, "mod", [src], tmp_path / "project") == 2
    assert "cudaq_detail_call_direct(cudaq_handler_two, " in out.read_text()


def test_cli_writes_the_switch(tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text("CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(k);\n")
    out = tmp_path / "o" / "handler_switch.cu"
    assert hs.main(["--target", "t", "-o", str(out), str(src)]) == 0
    assert "return cudaq_detail_call_direct(cudaq_handler_k, " in out.read_text()
    assert str(src) in out.read_text()  # outside any project directory: shown as given


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/b/cudaq_realtime/_core/handler_switch.cu", "<handler switch of _core>"),
        ("/b/cudaq_realtime/_core/other.cu", None),
        ("/b/elsewhere/_core/handler_switch.cu", None),
    ],
)
def test_records_name_a_switch_by_its_target(path: str, name: str | None) -> None:
    assert hs.generated_switch_name(Path(path)) == name


def test_cmake_counts_the_direct_calls_the_generator_writes() -> None:
    """The CMake package embeds a switch only when it has a direct call: it counts them
    with a regular expression over the generated lines, which must match each one."""
    cmake = (Path(hs.__file__).parent.parent / "cmake" / "skbuild_cudaqConfig.cmake").read_text()
    found = re.search(r'file\(STRINGS "\$\{_switch\}" _calls REGEX "([^"]+)"\)', cmake)
    assert found is not None
    pattern = found.group(1).replace("\\\\", "\\")  # CMake string escapes, then a regex
    text = hs.switch_source("t", [("a.cu", ["one", "two"]), ("b.cu", ["three"])], [("b.cu", ["w"])])
    assert sum(1 for line in text.splitlines() if re.search(pattern, line)) == 4
    none = hs.switch_source("t", [("a.cu", [])])
    assert not any(re.search(pattern, line) for line in none.splitlines())
