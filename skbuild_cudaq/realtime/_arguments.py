"""Typed errors at the API edge: :func:`typed_arguments`, the one check of the arguments of
:mod:`skbuild_cudaq.realtime`'s public functions.

A call with an argument of the wrong type (``link_device_code(module, "sm_90")``, the
signature of an older release) must be one :class:`~skbuild_cudaq.realtime.errors.WrongTypeError`
line that names the function, the parameter, what was passed and what to pass -- not an
``AttributeError`` from deep inside. The function's own annotations say what it takes: they
are read (evaluated in the function's module) once, at the first call, into a tuple of
classes per parameter (``Any`` and bare ``*args`` are not checked); each call then costs one
``isinstance`` per argument. A function on a hot path (``function_id``) checks its one
argument itself and raises the same error.
"""

from __future__ import annotations

import collections.abc
import functools
import os
import types
import typing
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

__all__ = ["accepted", "typed_arguments"]

P = ParamSpec("P")
R = TypeVar("R")

#: how a class is named in messages (the rest by their own name)
_WORDS: dict[type, str] = {
    types.ModuleType: "a module",
    type(None): "None",
    collections.abc.Iterable: "an iterable",
    collections.abc.Callable: "a callable",  # type: ignore[dict-item]
    os.PathLike: "os.PathLike",
}


def _classes(hint: Any) -> tuple[type, ...] | None:
    """The classes ``hint`` accepts (None: anything, e.g. ``Any``)."""
    if hint is Any or isinstance(hint, TypeVar):
        return None
    if hint is None or hint is type(None):
        return (type(None),)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        found: list[type] = []
        for arg in typing.get_args(hint):
            classes = _classes(arg)
            if classes is None:
                return None
            found += classes
        return tuple(dict.fromkeys(found))
    if origin is not None:  # os.PathLike[str], Iterable[...], Callable[...]
        return _classes(origin)
    if hint is float:
        return (int, float)  # PEP 484: an int is a float
    if isinstance(hint, type):
        return (hint,)
    msg = f"cannot check arguments against the annotation {hint!r}"
    raise TypeError(msg)


def _parameters(fn: Callable[..., Any]) -> tuple[list[str], list[str]]:
    """``fn``'s positional parameters and its keyword-only ones, from its code object (no
    :mod:`inspect`: this runs on a warm start's lookup path, which must stay light)."""
    code = fn.__code__
    positional = list(code.co_varnames[: code.co_argcount])
    keyword = list(code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount])
    return positional, keyword


def accepted(fn: Callable[..., Any]) -> dict[str, tuple[type, ...]]:
    """What each checked parameter of ``fn`` accepts (its annotations, resolved)."""
    fn = getattr(fn, "__wrapped__", fn)
    positional, keyword = _parameters(fn)
    found = {}
    for name in positional + keyword:
        hint = fn.__annotations__.get(name)
        if hint is None:
            continue
        if isinstance(hint, str):  # from __future__ import annotations: the module's names
            hint = eval(hint, fn.__globals__)  # our own source's annotation
        classes = _classes(hint)
        if classes is not None:
            found[name] = classes
    return found


def _words(classes: tuple[type, ...]) -> str:
    names = [_WORDS.get(c, c.__name__) for c in classes if c is not bool]
    if int in classes and float in classes:
        names.remove("int")
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _wrong(value: object, classes: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in classes:
        return True  # True is an int to isinstance, never a count or an id here
    return not isinstance(value, classes)


def typed_arguments(**hints: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Check the arguments of the decorated function against its annotations; ``hints``:
    per parameter, what to say after "pass" for a wrong value (default: the types)."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        names = _parameters(fn)[0]
        checks: dict[str, tuple[type, ...]] | None = None

        def fail(name: str, value: object, classes: tuple[type, ...]) -> Exception:
            from skbuild_cudaq.realtime.errors import WrongTypeError

            shown = repr(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            say = hints.get(name) or _words(classes)
            msg = (
                f"{fn.__name__}(): {name} must be {_words(classes)}, not "
                f"{type(value).__name__} {shown}: pass {say}"
            )
            return WrongTypeError(msg)

        @functools.wraps(fn)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            nonlocal checks
            if checks is None:
                checks = accepted(fn)
            for name, value in zip(names, args, strict=False):
                classes = checks.get(name)
                if classes is not None and _wrong(value, classes):
                    raise fail(name, value, classes)
            for name, value in kwargs.items():
                classes = checks.get(name)
                if classes is not None and _wrong(value, classes):
                    raise fail(name, value, classes)
            return fn(*args, **kwargs)

        return checked

    return decorate
