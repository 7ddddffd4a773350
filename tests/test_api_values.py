"""The run time's value objects refuse bad input at construction, with a typed error naming
the field and what it accepts (plain: no GPU, no toolchain)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skbuild_cudaq.realtime import DispatcherConfig, LaunchConfig, LinkOptions, RingLayout
from skbuild_cudaq.realtime.errors import InvalidArgumentError, LinkError


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


# -- LaunchConfig ------------------------------------------------------------------------


def test_launch_config_is_normalised_on_construction() -> None:
    config = LaunchConfig(4, [32, 2], cluster=2)  # type: ignore[arg-type]
    assert (config.grid, config.block, config.cluster) == ((4, 1, 1), (32, 2, 1), (2, 1, 1))
    assert config == LaunchConfig((4, 1, 1), (32, 2, 1), cluster=(2, 1, 1))
    assert hash(config) == hash(LaunchConfig((4, 1, 1), (32, 2, 1), cluster=(2, 1, 1)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"grid": 0, "block": 1}, "grid must be a positive int"),
        ({"grid": True, "block": 1}, "grid must be a positive int"),
        ({"grid": 1, "block": (32, False)}, "block must be a positive int"),
        ({"grid": 1 << 40, "block": 1}, "grid must be a positive int"),
        ({"grid": "4", "block": 1}, "grid must be a positive int"),
        ({"grid": 1, "block": 1.5}, "block must be a positive int"),
        ({"grid": 3, "block": 1, "cluster": 2}, "not a multiple of the cluster"),
        ({"grid": 1, "block": 1, "shared_mem": -1}, "shared_mem must be >= 0"),
        ({"grid": 1, "block": 1, "shared_mem": "x"}, "shared_mem must be >= 0"),
        ({"grid": 1, "block": 1, "cooperative": "yes"}, "cooperative='yes': expected True or"),
    ],
)
def test_launch_config_refuses_bad_values_when_it_is_made(
    kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        LaunchConfig(**kwargs)


# -- DispatcherConfig and RingLayout --------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"device": True}, "device=True: a CUDA device ordinal is an int >= 0"),
        ({"device": "0"}, "device='0': a CUDA device ordinal is an int >= 0"),
        ({"device": None}, "device=None: a CUDA device ordinal"),
        ({"block_size": True}, "block_size=True: the built-in kernel runs 1..1024"),
        ({"block_size": 1.5}, "block_size=1.5: the built-in kernel runs 1..1024"),
        ({"stop_timeout": -1}, r"stop_timeout=-1: the seconds stop\(\) waits"),
        ({"stop_timeout": float("nan")}, "stop_timeout=nan: the seconds"),
        ({"stop_timeout": "10"}, "stop_timeout='10': the seconds"),
        ({"stop_timeout": True}, "stop_timeout=True: the seconds"),
        ({"shared_ring": "yes"}, "shared_ring='yes': expected True or False"),
        ({"num_slots": True}, "num_slots=True: a ring needs at least 1 slot"),
        ({"slot_size": True}, "slot_size=True: slot_size must be a multiple of 8"),
    ],
)
def test_dispatcher_config_refuses_values_of_the_wrong_type(
    kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        DispatcherConfig(**kwargs)


def test_dispatcher_config_takes_an_unbounded_stop_timeout() -> None:
    assert DispatcherConfig(stop_timeout=float("inf")).stop_timeout == float("inf")
    assert DispatcherConfig(stop_timeout=1).stop_timeout == 1


def test_ring_layout_refuses_bools() -> None:
    with pytest.raises(InvalidArgumentError, match="num_slots=True"):
        RingLayout(True, 64)
    with pytest.raises(InvalidArgumentError, match="slot_size=True"):
        RingLayout(4, True)


def test_a_dispatcher_refuses_what_is_not_a_config_or_a_bridge() -> None:
    from skbuild_cudaq.realtime import Dispatcher

    with pytest.raises(TypeError, match=r"takes a DispatcherConfig .* not str"):
        Dispatcher("x")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"takes a bridge .* not object"):
        Dispatcher(bridge=object())  # type: ignore[type-var]


@pytest.mark.parametrize(
    ("address", "match"),
    [(True, "not bool"), ("0x1000", "not str"), (4096.0, "not float"), (None, "not NoneType")],
)
def test_a_device_entry_takes_an_int_address(address: Any, match: str) -> None:
    from skbuild_cudaq.realtime import FunctionTable

    with pytest.raises(TypeError, match=f"'echo': the address is an int .*{match}"):
        FunctionTable().add_device("echo", address)


def test_a_device_entry_takes_a_numpy_integer_address() -> None:
    np = pytest.importorskip("numpy")
    from skbuild_cudaq.realtime import FunctionTable

    assert FunctionTable().add_device("echo", np.uint64(0x7000)).address == 0x7000
