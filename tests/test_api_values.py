"""The run time's value objects refuse bad input at construction, with a typed error naming
the field and what it accepts (plain: no GPU, no toolchain)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skbuild_cudaq.realtime import LinkOptions
from skbuild_cudaq.realtime.errors import LinkError


@pytest.mark.parametrize("extra", ["-O3", b"-O3", 3, ("-O3", 3), [None]])
def test_link_options_extra_is_a_sequence_of_option_strings(extra: Any) -> None:
    with pytest.raises(LinkError, match=r"LinkOptions\.extra=.*one string each"):
        LinkOptions(extra=extra)


def test_link_options_normalise_extra_and_runtime_dir() -> None:
    options = LinkOptions(extra=["-O3", "-g"], runtime_dir="/x")  # type: ignore[arg-type]
    assert options.extra == ("-O3", "-g")
    assert options.runtime_dir == Path("/x")
    assert options == LinkOptions(extra=("-O3", "-g"), runtime_dir=Path("/x"))
    assert hash(options) == hash(LinkOptions(extra=("-O3", "-g"), runtime_dir=Path("/x")))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"isolated": "no"}, r"LinkOptions\.isolated='no': expected True or False"),
        ({"graph_launch": 1}, r"LinkOptions\.graph_launch=1: expected True or False"),
        ({"timeout": True}, "invalid link timeout True"),
        ({"timeout": "5"}, "invalid link timeout '5'"),
        ({"memory_limit": 2.5e9}, "invalid link memory limit 2500000000.0"),
        ({"memory_limit": True}, "invalid link memory limit True"),
    ],
)
def test_link_options_refuse_values_of_the_wrong_type(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(LinkError, match=match):
        LinkOptions(**kwargs)
