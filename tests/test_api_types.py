"""Typed errors at the API edge (issue 56, item 9): every public function of
:mod:`skbuild_cudaq.realtime` checks its arguments' types and says what to pass, in one
:class:`~skbuild_cudaq.realtime.errors.WrongTypeError` (an ``InvalidArgumentError`` and a
``TypeError``) raised before any work: no GPU, no nvJitLink, no file is touched."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

import pytest

import skbuild_cudaq.realtime as rt
from skbuild_cudaq.realtime._arguments import accepted, typed_arguments
from skbuild_cudaq.realtime.errors import InvalidArgumentError, WrongTypeError


class Wrong:
    """A value no public function takes (not a module, path, str, number or callable)."""

    def __repr__(self) -> str:
        return "<Wrong>"


def _functions() -> list[tuple[str, Callable[..., Any]]]:
    found = []
    for name in rt.__all__:
        value = getattr(rt, name)
        if inspect.isfunction(value):
            found.append((name, value))
    return found


FUNCTIONS = _functions()
#: parameters that take anything (a driver call's return, a stream handle, kernel arguments)
ANYTHING = {("check_driver_result", "ret"), ("launch_kernel", "stream")}


def test_the_walk_sees_every_public_function() -> None:
    names = {name for name, _ in FUNCTIONS}
    assert {"link_device_code", "get_device_kernel", "check_package", "function_id"} <= names
    assert len(names) == 12


@pytest.mark.parametrize(("name", "fn"), FUNCTIONS, ids=[n for n, _ in FUNCTIONS])
def test_each_parameter_of_wrong_type_is_a_typed_error_naming_it(
    name: str, fn: Callable[..., Any]
) -> None:
    """Each parameter in turn gets a wrong value, the others too: the first wrong one is
    named, with what was passed and what to pass."""
    signature = inspect.signature(fn).parameters.values()
    params = [
        p
        for p in signature
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and (name, p.name) not in ANYTHING
    ]
    if not params:
        assert name == "release_library"  # takes nothing
        return
    positional = [p.name for p in signature if p.kind is p.POSITIONAL_OR_KEYWORD]
    required = [p.name for p in signature if p.name in positional and p.default is p.empty]
    for param in params:
        # the required ones wrong too (None where anything goes), this one wrong in its place
        values = {n: None if (name, n) in ANYTHING else Wrong() for n in required}
        values[param.name] = Wrong()
        args = [values.pop(n) for n in positional if n in values]
        kwargs = values
        with pytest.raises(WrongTypeError) as info:
            fn(*args, **kwargs)
        text = str(info.value)
        assert "\n" not in text and "<Wrong>" in text and "pass " in text, text
        assert text.startswith(f"{name}(): ")
        first_wrong = next(n for n in positional if n in [*required, param.name]
                           and (name, n) not in ANYTHING)  # fmt: skip
        assert f"{first_wrong} must be" in text or "a function is named by" in text, text


def test_link_device_code_with_the_old_signature_says_what_to_pass() -> None:
    """``link_device_code(module, "sm_90")`` raised AttributeError from inside the link."""
    module = types.ModuleType("ext")
    with pytest.raises(InvalidArgumentError) as info:
        rt.link_device_code(module, "sm_90")  # type: ignore[arg-type]
    assert isinstance(info.value, TypeError)
    assert str(info.value) == (
        "link_device_code(): options must be LinkOptions or None, not str 'sm_90': pass "
        "LinkOptions(arch='sm_90') to link for an architecture, or None for this GPU"
    )


def test_right_types_pass_the_check() -> None:
    """What the annotations allow is not refused: the call goes on to its own checks."""
    with pytest.raises(rt.RingError, match="is not the name of a shared-memory ring"):
        rt.connect_host_ring("nope", 4, 64)
    with pytest.raises(WrongTypeError, match="num_slots must be int, not bool"):
        rt.connect_host_ring("nope", True, 64)
    assert rt.function_id(7) == 7
    with pytest.raises(WrongTypeError, match=r"not float 1\.5"):
        rt.function_id(1.5)  # type: ignore[arg-type]


def test_every_annotation_resolves() -> None:
    """An annotation the helper cannot read would surface only at a user's first call."""
    for name, fn in FUNCTIONS:
        if name in ("function_id", "release_library"):
            continue  # checks its one argument itself (a client's hot path); takes none
        assert hasattr(fn, "__wrapped__"), name
        accepted(fn)


def test_the_helper_on_a_function_of_its_own() -> None:
    @typed_arguments(count="a number of slots, e.g. 8")
    def sample(count: int, label: str | None = None, *rest: Any, scale: float = 1.0) -> int:
        return count

    assert sample(3, None, "anything", scale=2) == 3
    with pytest.raises(WrongTypeError, match=r"count must be int, not str '3': pass a number"):
        sample("3")  # type: ignore[arg-type]
    with pytest.raises(WrongTypeError, match="label must be str or None, not int 5"):
        sample(1, 5)  # type: ignore[arg-type]
    with pytest.raises(WrongTypeError, match="scale must be float, not str"):
        sample(1, scale="x")  # type: ignore[arg-type]
