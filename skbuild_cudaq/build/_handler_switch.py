"""The handler switch: a direct, inlinable call for each thread-shaped handler a module exports.

A dispatch kernel calls a handler through the device hook ``cudaq_dev_call_handler``
(``cudaq/realtime/unified_dispatch_device.cuh``). Without a definition of its own a
module links the run time's default form, an indirect call through the pointer of
the function table: the caller's live registers go to local memory and everything
the handler may have changed is read again, and the handler is compiled without
knowing where its arguments and result are. The *handler switch* generated here is
the module's own definition: it compares the address with each thread-shaped
handler the module's device sources export and calls a match through its (const)
export global, which LTO folds into a direct call and inlines into the kernel; any
other address goes through the pointer. The answer is the same either way.

Only thread-shaped handlers (``CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION``) are called
directly: they serve one request on one thread, where the call is a large part of
the request's cost; a launch-wide handler's cost is dominated by the barriers
around it. Each handler called directly is compiled into every dispatch kernel of
the module, so the list is kept to what pays: on an H200 the switch took 0.07-0.19
us off a small handler's round trip and 0.3-0.5 us off a byte loop's
(``bench/phases.py``, the ``@pointer`` rows) and made example_app's link 1.04x as
long there (1.5x on a 2-core machine; a cold start only: the link cache serves
later ones). Over every export, launch-wide ones too, it made the cluster kernel's
launch-wide round trip slower (1.16x -> 1.42x of the floor, history run K).

The exports are found in the sources' text (a line starting with
``CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(name)``); the switch refers to each one
*weakly*, so a name the compiler never sees (under an ``#if`` that is off) is
skipped instead of failing the link, and an export this scan misses (written
through another macro) still works through the pointer.

One generator for every front door: the CMake package runs this module at
configure time (``_run_handler_switch.py``), the setuptools command and the
benchmarks import it.
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


def exported_handlers(text: str, *, shape: str = "thread") -> list[str]:
    """The handler names a device source's text exports, in order, without repeats.

    ``shape``: ``"thread"`` (what the switch calls directly: the thread-shaped exports,
    ``CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION``), ``"launch"`` (the launch-wide ones,
    ``CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION``) or ``"any"``.
    """
    wanted = {"thread": ("THREAD",), "launch": ("DEVICE",), "any": ("DEVICE", "THREAD")}[shape]
    names: list[str] = []
    for match in _EXPORT.finditer(text):
        if match.group(1) in wanted and match.group(2) not in names:
            names.append(match.group(2))
    return names


def switch_source(target: str, exports: Sequence[tuple[str, Sequence[str]]]) -> str:
    """The CUDA source of ``target``'s handler switch.

    ``exports``: (the source as shown in the file's comment, its exported names) per
    device source. Names exported by several sources appear once. With no names the
    switch is the pointer call alone (what the default form does).
    """
    names: list[str] = []
    where = ""
    for shown, found in exports:
        if found:
            where += f" *   {shown.replace('*/', '* /')}: {', '.join(found)}\n"
        names += [n for n in found if n not in names]
    decls = "".join(
        f"extern __device__ __attribute__((weak)) const cudaq_device_handler_t cudaq_handler_{n};\n"
        for n in names
    )
    cases = "".join(
        f"  if (&cudaq_handler_{n} != nullptr && handler == cudaq_handler_{n})\n"
        f"    return cudaq_detail_call_direct(cudaq_handler_{n}, args, arg_len, result,\n"
        f"                                    max_result_len, result_len);\n"
        for n in names
    )
    shown_target = target.replace("*/", "* /")
    where = where or " *   (no source exports a thread-shaped handler)\n"
    return f"""/* Generated by skbuild-cudaq for {shown_target}: do not edit.
 * The handler switch (cudaq_dev_call_handler, see cudaq/realtime/unified_dispatch_device.cuh):
 * a direct call, which LTO inlines into the dispatch kernel, for each thread-shaped handler
 * exported by
{where} * and the pointer for any other handler. Each export is referred to weakly: a name that
 * is not exported after all (under an #if that is off) is skipped, not a link error. */
#include <cudaq/realtime/unified_dispatch_device.cuh>

extern "C" {{
{decls}
__device__ int cudaq_dev_call_handler(cudaq_device_handler_t handler, const void *args,
                                      uint32_t arg_len, void *result, uint32_t max_result_len,
                                      uint32_t *result_len) {{
{cases}  // Any other handler: through the pointer. Each call has a length of its own
  // (cudaq_detail_call_direct), so that the caller's stays in a register.
  return cudaq_detail_call_direct(handler, args, arg_len, result, max_result_len, result_len);
}}
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

    Returns the number of handlers it calls directly (the thread-shaped exports).
    """
    exports: list[tuple[str, list[str]]] = []
    seen: set[Path] = set()
    for source in sources:
        path = Path(source)
        if path in seen:
            continue
        seen.add(path)
        text = path.read_text(encoding="utf-8", errors="replace")
        exports.append((_shown(path, project_dir), exported_handlers(text)))
    content = switch_source(target, exports)
    if not output.is_file() or output.read_text(encoding="utf-8") != content:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(content, encoding="utf-8")
    return len({n for _, found in exports for n in found})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a module's handler switch.")
    parser.add_argument("--target", required=True, help="the module (shown in the comment)")
    parser.add_argument("--project-dir", type=Path, help="sources are shown relative to it")
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("sources", nargs="+", type=Path)
    opts = parser.parse_args(argv)
    write_switch(opts.output, opts.target, opts.sources, opts.project_dir)
    return 0
