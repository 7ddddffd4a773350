"""The LTO-IR architecture grammar of dispatch kernels and handlers (one definition).

Read from ``skbuild_cudaq/cmake/architectures.txt``, which the CMake package reads too, so
that ``[tool.cudaq]``, the setuptools command and ``ARCHITECTURES`` of the CMake functions
accept the same values: a number from :data:`MIN_ARCHITECTURE` to :data:`MAX_ARCHITECTURE`,
bare or with an ``sm_``/``lto_``/``compute_`` prefix. The GPU a cubin is *linked* for (the run
time's ``LinkOptions.arch``, ``link --arch``, ``check --arch``) is written the same way
(:func:`architecture_number`): a variant such as ``sm_90a`` is refused everywhere, since no
LTO-IR of ours is built for one and the plain number's cubin runs on that GPU.

Neither build side nor settings: both use it (``settings/`` never imports ``build/``).
"""

from __future__ import annotations

import re

from skbuild_cudaq._paths import cmake_dir

__all__ = [
    "ARCHITECTURE_FORM",
    "DEFAULT_ARCHITECTURES",
    "GRAMMAR_FILE",
    "MAX_ARCHITECTURE",
    "MIN_ARCHITECTURE",
    "PREFIXES",
    "VARIANT_FORM",
    "architecture_number",
]

#: The grammar file, in the CMake package directory.
GRAMMAR_FILE = "architectures.txt"


def _read() -> dict[str, list[str]]:
    entries: dict[str, list[str]] = {}
    for line in (cmake_dir() / GRAMMAR_FILE).read_text(encoding="utf-8").splitlines():
        text = line.split("#", 1)[0].split()
        if text:
            entries[text[0]] = text[1:]
    return entries


_GRAMMAR = _read()
#: Prefixes a value may carry (``sm`` for ``sm_80``).
PREFIXES: tuple[str, ...] = tuple(_GRAMMAR["prefixes"])
#: The oldest GPU architecture a dispatch kernel can target (the built-in kernel's).
MIN_ARCHITECTURE = int(_GRAMMAR["minimum"][0])
#: The largest architecture number accepted, sm_9999. A bound, so that a value with thousands
#: of digits is a clear problem rather than a number no tool can take.
MAX_ARCHITECTURE = int(_GRAMMAR["maximum"][0])
#: Architectures used when a dispatch kernel names none.
DEFAULT_ARCHITECTURES: tuple[str, ...] = tuple(_GRAMMAR["default"])
#: One value, bare or prefixed; group 1 is the number.
ARCHITECTURE_FORM = re.compile(rf"(?:(?:{'|'.join(PREFIXES)})_)?([0-9]+)")
#: An architecture-specific variant (``90a``, ``sm_100f``), which the grammar refuses; group 1 is
#: the number.
VARIANT_FORM = re.compile(rf"(?:(?:{'|'.join(PREFIXES)})_)?([0-9]+)[a-z]")


def architecture_number(text: str) -> int | None:
    """The number one value of the grammar means (``"sm_90"``, ``"lto_90"``, ``"90"``: 90);
    None where ``text`` is no value of it (a variant, another word, over
    :data:`MAX_ARCHITECTURE`). The range's floor, :data:`MIN_ARCHITECTURE`, is the caller's
    to check: each says why a smaller number cannot serve."""
    m = ARCHITECTURE_FORM.fullmatch(text)
    if m is None:
        return None
    digits = m.group(1).lstrip("0") or "0"
    # int() refuses over 4300 digits; anything over MAX_ARCHITECTURE is no architecture
    number = int(digits) if len(digits) <= 9 else MAX_ARCHITECTURE + 1
    return number if number <= MAX_ARCHITECTURE else None
