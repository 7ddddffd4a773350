"""Native host handlers: ``<cudaq/realtime/host_handler.h>`` and ``get_host_handler``.

Shared libraries are built here with the C compiler, the way extension modules are
built (``-fvisibility=hidden``, ``--gc-sections``, stripped), C and C++; no CUDA.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import skbuild_cudaq
from skbuild_cudaq.realtime import (
    FunctionTable,
    InvalidArgumentError,
    RealtimeError,
    get_host_handler,
)
from skbuild_cudaq.realtime.host.dispatcher import STATUS_RESULT_TOO_LONG
from skbuild_cudaq.realtime.host.handlers import NativeHostHandler, exported_host_handlers

INCLUDE = skbuild_cudaq.include_dir()

HANDLERS_C = r"""
#include <cudaq/realtime/host_handler.h>
#include <string.h>

static int add_one(const void *args, uint32_t arg_len, void *result, uint32_t max_result_len,
                   uint32_t *result_len) {
  if (arg_len > max_result_len) return 1;
  for (uint32_t i = 0; i < arg_len; ++i)
    ((uint8_t *)result)[i] = (uint8_t)(((const uint8_t *)args)[i] + 1);
  *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(add_one);

int status_of_first(const void *args, uint32_t arg_len, void *result, uint32_t max_result_len,
                    uint32_t *result_len) {
  (void)result; (void)max_result_len;
  *result_len = 0;
  return arg_len ? ((const uint8_t *)args)[0] : 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(status_of_first);

static int too_long(const void *args, uint32_t arg_len, void *result, uint32_t max_result_len,
                    uint32_t *result_len) {
  (void)args; (void)arg_len; (void)result;
  *result_len = max_result_len + 1;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(too_long);

int not_exported(void) { return 7; }
"""

FLAGS = ["-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-ffunction-sections",
         "-fdata-sections", "-Wl,--gc-sections", "-Wall", "-Wextra", "-Werror"]  # fmt: skip


def _cc(language: str) -> str:
    name = {"c": "cc", "c++": "c++"}[language]
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"no {language} compiler ({name}) on PATH")
    return found


def _build(tmp_path: Path, source: str, *, language: str = "c", extra: tuple[str, ...] = (),
           name: str = "handlers", flags: list[str] = FLAGS) -> Path:  # fmt: skip
    src = tmp_path / (name + (".c" if language == "c" else ".cpp"))
    src.write_text(source)
    out = tmp_path / f"lib{name}.so"
    std = "-std=c11" if language == "c" else "-std=c++11"
    cmd = [_cc(language), std, *flags, *extra, f"-I{INCLUDE}", str(src), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return out


def _strip(path: Path, *args: str) -> None:
    strip = shutil.which("strip")
    if strip is None:
        pytest.skip("no strip on PATH")
    subprocess.run([strip, *args, str(path)], check=True)


@pytest.mark.parametrize("language", ["c", "c++"])
@pytest.mark.parametrize("strip", [None, "--strip-all", "--strip-unneeded"])
def test_exports_survive_hidden_visibility_gc_sections_and_strip(
    tmp_path: Path, language: str, strip: str | None
) -> None:
    lib = _build(tmp_path, HANDLERS_C, language=language)
    if strip is not None:
        _strip(lib, strip)
    assert exported_host_handlers(lib) == ["add_one", "status_of_first", "too_long"]
    add_one = get_host_handler(lib, "add_one")
    assert isinstance(add_one, NativeHostHandler)
    assert add_one.name == "add_one" and add_one.path == lib.resolve()
    assert add_one(bytes([0, 1, 255])) == (0, bytes([1, 2, 0]))
    assert add_one(b"abc", max_result_len=2) == (1, b"")  # its own status
    assert get_host_handler(lib, "status_of_first")(b"\x07") == (7, b"")
    assert get_host_handler(lib, "too_long")(b"", 16) == (STATUS_RESULT_TOO_LONG, b"")
    # the full symbol name is accepted too
    assert get_host_handler(lib, "cudaq_host_handler_add_one").address == add_one.address


def test_a_direct_call_takes_bytes_like_arguments_only(tmp_path: Path) -> None:
    """The arguments of a direct call are bytes-like (any buffer, read as its bytes); an int
    used to become that many zero bytes (bytes(5)), a list of ints their bytes."""
    import array

    add_one = get_host_handler(_build(tmp_path, HANDLERS_C), "add_one")
    assert add_one(bytearray(b"\x01")) == (0, b"\x02")
    assert add_one(memoryview(array.array("H", [0x0201]))) == (0, b"\x02\x03")
    for wrong in (5, [1, 2], "ab"):
        with pytest.raises(TypeError, match="bytes-like"):
            add_one(wrong)  # type: ignore[arg-type]


def test_a_name_that_is_not_exported_lists_the_names_that_are(tmp_path: Path) -> None:
    lib = _build(tmp_path, HANDLERS_C)
    with pytest.raises(InvalidArgumentError, match="no native host handler 'not_exported'") as e:
        get_host_handler(lib, "not_exported")
    assert e.value.available == ("add_one", "status_of_first", "too_long")
    assert "exported host handlers: add_one, status_of_first, too_long" in str(e.value)
    assert "CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(not_exported)" in str(e.value)


def test_a_record_hidden_by_a_version_script_is_named_as_such(tmp_path: Path) -> None:
    """(With --gc-sections too, the hidden record is dropped altogether: then it is just
    not exported.)"""
    script = tmp_path / "only_init.map"
    script.write_text("{ global: PyInit_x; local: *; };\n")
    flags = [f for f in FLAGS if f != "-Wl,--gc-sections"]
    lib = _build(tmp_path, HANDLERS_C, extra=(f"-Wl,--version-script={script}",), flags=flags)
    assert exported_host_handlers(lib) == []
    with pytest.raises(InvalidArgumentError, match="version script") as e:
        get_host_handler(lib, "add_one")
    assert e.value.available == ()


def test_a_wrong_signature_does_not_compile(tmp_path: Path) -> None:
    source = """#include <cudaq/realtime/host_handler.h>
static int bad(const void *args, uint32_t arg_len) { (void)args; return (int)arg_len; }
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(bad);
"""
    for language, suffix in (("c", ".c"), ("c++", ".cpp")):
        src = tmp_path / f"bad{suffix}"
        src.write_text(source)
        proc = subprocess.run(
            [_cc(language), "-fPIC", "-shared", f"-I{INCLUDE}", str(src), "-o",
             str(tmp_path / "bad.so")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode != 0, language
        expected = "the handler must be int bad(" if language == "c" else "cudaq_host_handler_t"
        assert expected in proc.stderr, proc.stderr


def test_a_record_of_another_version_is_refused(tmp_path: Path) -> None:
    source = """#include <cudaq/realtime/host_handler.h>
static int h(const void *a, uint32_t n, void *r, uint32_t m, uint32_t *rl) {
  (void)a; (void)n; (void)r; (void)m; *rl = 0; return 0; }
__attribute__((visibility("default"))) const cudaq_host_export_t cudaq_host_handler_future =
    {CUDAQ_HOST_EXPORT_MAGIC, 2u, &h, "future"};
__attribute__((visibility("default"))) const cudaq_host_export_t cudaq_host_handler_alien =
    {0x12345678u, 1u, &h, "alien"};
"""
    lib = _build(tmp_path, source, name="versions")
    with pytest.raises(RealtimeError, match="record version 2; this skbuild-cudaq reads version 1"):
        get_host_handler(lib, "future")
    with pytest.raises(RealtimeError, match="not a record of CUDAQ_REALTIME_EXPORT_HOST_FUNCTION"):
        get_host_handler(lib, "alien")


def test_bad_modules_give_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="has no file"):
        get_host_handler(sys, "x")
    with pytest.raises(InvalidArgumentError, match="not an ELF file"):
        get_host_handler(types, "x")  # a pure-Python module: its .py file
    with pytest.raises(InvalidArgumentError, match="no such file"):
        get_host_handler(tmp_path / "missing.so", "x")
    with pytest.raises(InvalidArgumentError, match="no such file"):
        get_host_handler(tmp_path, "x")  # a directory
    with pytest.raises(InvalidArgumentError, match="an extension module object or the path"):
        get_host_handler(42, "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="non-empty str"):
        get_host_handler(types, "")
    elf_object = tmp_path / "object.o"  # an ELF file that cannot be loaded
    src = tmp_path / "o.c"
    src.write_text(HANDLERS_C)
    subprocess.run([_cc("c"), f"-I{INCLUDE}", "-fPIC", "-c", str(src), "-o", str(elf_object)],
                   check=True)  # fmt: skip
    with pytest.raises(InvalidArgumentError, match=r"object\.o: not a shared library"):
        get_host_handler(elf_object, "add_one")
    unloadable = _build(  # a shared library that cannot be loaded: an undefined symbol
        tmp_path,
        HANDLERS_C + "extern int cudaq_test_undefined(void);\n"
        '__attribute__((visibility("default"))) int calls_it(void) {\n'
        "  return cudaq_test_undefined();\n}\n",
        name="unloadable",
    )
    with pytest.raises(InvalidArgumentError, match=r"cannot load .* to call its host handlers: "
                       r".*cudaq_test_undefined"):  # fmt: skip
        get_host_handler(unloadable, "add_one")


def test_a_python_function_of_the_module_is_pointed_at(tmp_path: Path) -> None:
    lib = _build(tmp_path, HANDLERS_C)
    module = types.ModuleType("fake_extension")
    module.__file__ = str(lib)
    module.echo = lambda args: args  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgumentError, match="is a Python function of the module"):
        get_host_handler(module, "echo")
    # a module object's binary must be loaded already (it is not loaded behind its back)
    with pytest.raises(InvalidArgumentError, match="cannot load"):
        get_host_handler(module, "add_one")


def test_a_native_handler_goes_into_a_function_table(tmp_path: Path) -> None:
    handler = get_host_handler(_build(tmp_path, HANDLERS_C), "add_one")
    table = FunctionTable()
    entry = table.add_host("add_one", handler)
    assert entry.callable is handler
