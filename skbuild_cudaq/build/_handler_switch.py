"""The handler switch: a direct, inlinable call for each handler a module exports.

A dispatch kernel calls a handler through one of two device hooks
(``cudaq/realtime/unified_dispatch_device.cuh``): ``cudaq_dev_call_handler`` where one
thread serves a request (``cudaq_call_handler``), ``cudaq_dev_call_launch_handler`` where
every thread of the launch serves the same one (``cudaq_call_launch_handler``). Without a
definition of its own a module links the run time's default forms, an indirect call
through the pointer of the function table: the caller's live registers go to local
memory and everything the handler may have changed is read again, and the handler is
compiled without knowing where its arguments and result are. The *handler switch*
generated here is the module's own definition of both: each compares the address with
every handler of its shape the module's device sources export and calls a match through
its (const) export global, which LTO folds into a direct call and inlines into the
kernel; any other address goes through the pointer. The answer is the same either way.

One switch a shape: ``cudaq_dev_call_handler`` calls the thread-shaped exports
(``CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION``), ``cudaq_dev_call_launch_handler`` the
launch-wide ones (``CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION``), so each call site inlines
only the handlers it can call. Each handler called directly is compiled into every
dispatch kernel of the module that calls its hook. On an H200 the thread switch took
0.07-0.19 us off a small handler's round trip and 0.3-0.5 us off a byte loop's
and made example_app's link 1.04x as long there (1.5x on a 2-core machine; a cold start
only: the link cache serves later ones). One switch over every export, both shapes, made
the cluster kernel's launch-wide round trip slower (1.16x -> 1.42x of the floor): its
leader's path then inlined the launch-wide handlers too; with a switch a shape, the
launch-wide call got 0.16-0.22 us faster (``bench/README.md`` says where these
measurements are kept).

The exports are found in the sources' text (a line starting with
``CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(name)`` or ``..._DEVICE_FUNCTION(name)``);
the switch refers to each one *weakly*, so a name the compiler never sees (under an
``#if`` that is off) is skipped instead of failing the link, and an export this scan
misses (written through another macro) still works through the pointer.

One generator for every front door: the CMake package runs this module at
configure time (``_run_handler_switch.py``), the setuptools command and
``skbuild-cudaq phases`` import it.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "SWITCH_FILE",
    "exported_handlers",
    "exported_python_handlers",
    "generated_switch_name",
    "main",
    "switch_source",
    "write_switch",
]

#: The switch's file name in the build tree: ``cudaq_realtime/<target>/handler_switch.cu``
#: (the CMake package) or ``cudaq/<extension>/handler_switch.cu`` (the setuptools command);
#: the build records name it by its target.
SWITCH_FILE = "handler_switch.cu"
_SWITCH_DIRS = ("cudaq_realtime", "cudaq")

_EXPORT = re.compile(
    r"^[ \t]*CUDAQ_REALTIME_EXPORT_(DEVICE|THREAD)_FUNCTION[ \t]*\([ \t]*"
    r"([A-Za-z_][A-Za-z0-9_]*)[ \t]*\)",
    re.MULTILINE,
)


def generated_switch_name(path: Path) -> str | None:
    """How a build record names a generated switch (None: ``path`` is not one).

    Its build-tree path would make the record, and the binary, depend on where the
    build directory is.
    """
    if path.name == SWITCH_FILE and path.parent.parent.name in _SWITCH_DIRS:
        return f"<handler switch of {path.parent.name}>"
    return None


#: A Python handler (skbuild_cudaq.numba): ``@handler`` / ``@thread_handler`` (maybe with
#: arguments, maybe qualified) right above its ``def`` (other decorators may come between).
_PY_EXPORT = re.compile(
    r"^[ \t]*@(?:[A-Za-z_][\w.]*\.)?(handler|thread_handler)\b[^\n]*\n"
    r"(?:[ \t]*@[^\n]*\n)*[ \t]*def[ \t]+([A-Za-z_]\w*)",
    re.MULTILINE,
)


def exported_python_handlers(text: str, *, shape: str = "thread") -> list[str]:
    """:func:`exported_handlers` of a ``.py`` source: its decorated functions."""
    wanted = {"thread": ("thread_handler",), "launch": ("handler",)}.get(
        shape, ("handler", "thread_handler")
    )
    names: list[str] = []
    for match in _PY_EXPORT.finditer(text):
        if match.group(1) in wanted and match.group(2) not in names:
            names.append(match.group(2))
    return names


def exported_handlers(text: str, *, shape: str = "thread") -> list[str]:
    """The handler names a device source's text exports, in order, without repeats.

    ``shape``: ``"thread"`` (what ``cudaq_dev_call_handler`` calls: the thread-shaped exports,
    ``CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION``), ``"launch"`` (the launch-wide ones,
    ``CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION``) or ``"any"``.
    """
    wanted = {"thread": ("THREAD",), "launch": ("DEVICE",), "any": ("DEVICE", "THREAD")}[shape]
    names: list[str] = []
    for match in _EXPORT.finditer(text):
        if match.group(1) in wanted and match.group(2) not in names:
            names.append(match.group(2))
    return names


def _cases(names: Sequence[str]) -> str:
    return "".join(
        f"  if (&cudaq_handler_{n} != nullptr && handler == cudaq_handler_{n})\n"
        f"    return cudaq_detail_call_direct(cudaq_handler_{n}, args, arg_len, result,\n"
        f"                                    max_result_len, result_len);\n"
        for n in names
    )


def _merged(exports: Sequence[tuple[str, Sequence[str]]]) -> tuple[list[str], str]:
    """The names of ``exports`` once each, in order, and the comment's lines for them."""
    names: list[str] = []
    where = ""
    for shown, found in exports:
        if found:
            where += f" *   {shown.replace('*/', '* /')}: {', '.join(found)}\n"
        names += [n for n in found if n not in names]
    return names, where


def switch_source(
    target: str,
    exports: Sequence[tuple[str, Sequence[str]]],
    launch_exports: Sequence[tuple[str, Sequence[str]]] = (),
) -> str:
    """The CUDA source of ``target``'s handler switch.

    ``exports``: (the source as shown in the file's comment, its exported thread-shaped
    names) per device source; ``launch_exports``: the same for the launch-wide names.
    Names exported by several sources appear once. The source defines both hooks,
    ``cudaq_dev_call_handler`` over the thread-shaped names and
    ``cudaq_dev_call_launch_handler`` over the launch-wide ones; with no names a hook is
    the pointer call alone (what its default form does).
    """
    thread, where = _merged(exports)
    launch, launch_where = _merged(launch_exports)
    # Under NVRTC `#pragma weak`: NVRTC (13.x) gives the attribute's form a linkage its
    # own verifier rejects ("Global is external, but doesn't have external or weak
    # linkage"). Under nvcc the attribute, the form measured on the GPU (the pragma
    # compiles to other code there: the null test goes; nvJitLink's zero-filled stand-in
    # for a name never defined keeps either form correct).
    decls = "".join(
        "#ifdef __CUDACC_RTC__\n"
        f"extern __device__ const cudaq_device_handler_t cudaq_handler_{n};\n"
        f"#pragma weak cudaq_handler_{n}\n"
        "#else\n"
        f"extern __device__ __attribute__((weak)) const cudaq_device_handler_t cudaq_handler_{n};\n"
        "#endif\n"
        for n in thread + [n for n in launch if n not in thread]
    )
    shown_target = target.replace("*/", "* /")
    where = where or " *   (no source exports a thread-shaped handler)\n"
    launch_where = launch_where or " *   (no source exports a launch-wide handler)\n"
    pointer = (
        "  // Any other handler: through the pointer. Each call has a length of its own\n"
        "  // (cudaq_detail_call_direct), so that the caller's stays in a register.\n"
        "  return cudaq_detail_call_direct(handler, args, arg_len, result, max_result_len, "
        "result_len);\n"
    )
    return f"""/* Generated by skbuild-cudaq for {shown_target}: do not edit.
 * The handler switch (see cudaq/realtime/unified_dispatch_device.cuh): a direct call, which
 * LTO inlines into the dispatch kernel, for each handler exported by the module's sources,
 * and the pointer for any other handler.
 * cudaq_dev_call_handler (one thread serves a request): the thread-shaped exports of
{where} * cudaq_dev_call_launch_handler (the whole launch serves it): the launch-wide exports of
{launch_where} * Each export is referred to weakly: a name that is not exported after all
 * (under an #if that is off) is skipped, not a link error. */
#include <cudaq/realtime/unified_dispatch_device.cuh>

extern "C" {{
{decls}
__device__ int cudaq_dev_call_handler(cudaq_device_handler_t handler, const void *args,
                                      uint32_t arg_len, void *result, uint32_t max_result_len,
                                      uint32_t *result_len) {{
{_cases(thread)}{pointer}}}

__device__ int cudaq_dev_call_launch_handler(cudaq_device_handler_t handler, const void *args,
                                             uint32_t arg_len, void *result,
                                             uint32_t max_result_len, uint32_t *result_len) {{
{_cases(launch)}{pointer}}}
}}
"""


def _shown(path: Path, project_dir: Path | None) -> str:
    if project_dir is not None:
        try:
            return path.resolve().relative_to(project_dir.resolve()).as_posix()
        except ValueError:
            pass
    return str(path)


def write_switch(
    output: Path,
    target: str,
    sources: Iterable[str | os.PathLike[str]],
    project_dir: Path | None = None,
) -> int:
    """Write ``target``'s switch over ``sources`` to ``output`` (only if it changes).

    Returns the number of handlers it calls directly (the exports of either shape).
    """
    exports: list[tuple[str, list[str]]] = []
    launch: list[tuple[str, list[str]]] = []
    seen: set[Path] = set()
    for source in sources:
        path = Path(source)
        if path in seen:
            continue
        seen.add(path)
        text = path.read_text(encoding="utf-8", errors="replace")
        shown = _shown(path, project_dir)
        scan = exported_python_handlers if path.suffix == ".py" else exported_handlers
        exports.append((shown, scan(text)))
        launch.append((shown, scan(text, shape="launch")))
    content = switch_source(target, exports, launch)
    if not output.is_file() or output.read_text(encoding="utf-8") != content:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(content, encoding="utf-8")
    return len({n for _, found in exports + launch for n in found})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a module's handler switch.")
    parser.add_argument("--target", required=True, help="the module (shown in the comment)")
    parser.add_argument("--project-dir", type=Path, help="sources are shown relative to it")
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("sources", nargs="+", type=Path)
    opts = parser.parse_args(argv)
    write_switch(opts.output, opts.target, opts.sources, opts.project_dir)
    return 0
