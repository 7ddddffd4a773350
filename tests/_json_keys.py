"""The keys ``docs/reference/cli.md`` documents for each ``--json`` document, compared with
what a command wrote: every key written is documented and every key documented is written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

CLI_DOC = Path(__file__).resolve().parent.parent / "docs" / "reference" / "cli.md"

#: ``{key: children or None}``: a key with no children is a leaf (any value).
Tree = dict[str, "Tree | None"]


def documented(heading: str) -> Tree:
    """The key tree listed under ``### `HEADING``` of the command-line reference."""
    text = CLI_DOC.read_text(encoding="utf-8")
    match = re.search(rf"^### `{re.escape(heading)}`\n(.*?)(?=^#|\Z)", text, re.M | re.S)
    assert match is not None, f"no section '### `{heading}`' in {CLI_DOC.name}"
    root: Tree = {}
    stack: list[tuple[int, Tree]] = [(-1, root)]
    for line in match.group(1).splitlines():
        item = re.match(r"( *)- `(\w+)`", line)
        if item is None:
            continue
        depth = len(item.group(1))
        while stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1]
        children: Tree = {}
        parent[item.group(2)] = children
        stack.append((depth, children))
    return _leaves_as_none(root)


def _leaves_as_none(tree: Tree) -> Tree:
    return {k: (_leaves_as_none(v) if v else None) for k, v in tree.items()}


def assert_documented(heading: str, doc: dict[str, Any]) -> None:
    """``doc``'s keys, at every level where it has objects, are exactly those documented."""
    _compare(documented(heading), [doc], heading)


def _compare(tree: Tree, objects: list[Any], where: str) -> None:
    objects = [o for o in objects if isinstance(o, dict)]
    if not objects:
        return  # nothing written at this level (null, or an empty list): nothing to compare
    written = set().union(*(o.keys() for o in objects))
    assert written == set(tree), (
        f"{where}: written but not documented {sorted(written - set(tree))}, "
        f"documented but not written {sorted(set(tree) - written)}"
    )
    for key, children in tree.items():
        if children is None:
            continue
        values: list[Any] = []
        for o in objects:
            value = o[key]
            values.extend(value if isinstance(value, list) else [value])
        _compare(children, values, f"{where} {key}")
