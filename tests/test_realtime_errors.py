"""Every run-time error lives in ``realtime/errors.py``, under ``RealtimeError``; the package
exports the ones an application catches; the public driver-result check (issue 16)."""

from __future__ import annotations

import inspect

import pytest

import skbuild_cudaq.realtime as rt
from skbuild_cudaq.realtime import errors


def test_every_runtime_error_is_a_realtime_error_in_the_errors_module() -> None:
    classes = [
        value
        for name, value in vars(errors).items()
        if inspect.isclass(value)
        and issubclass(value, Exception)
        and value.__module__ == errors.__name__
    ]
    assert {c.__name__ for c in classes} >= {
        "RingError",
        "RingProtocolError",
        "ProtocolError",
        "HostDispatcherError",
        "UdpFeederError",
    }
    for cls in classes:
        assert issubclass(cls, rt.RealtimeError), cls
        assert cls.__name__ in errors.__all__, cls
    assert issubclass(rt.InvalidArgumentError, ValueError)
    # the package exports the ones an application catches: the same classes
    exported = [getattr(rt, n) for n in rt.__all__ if n.endswith("Error")]
    assert {e.__name__ for e in exported} == {
        "RealtimeError",
        "CUDAError",
        "LinkError",
        "InvalidArgumentError",
        "LibraryConflictError",
        "DeviceCodeError",
        "NoDeviceError",
        "RingError",
    }
    assert all(getattr(errors, e.__name__) is e for e in exported)


def test_check_driver_result_returns_values_and_raises_cuda_error() -> None:
    class Result(int):
        name = "CUDA_ERROR_INVALID_VALUE"

    assert rt.check_driver_result((0,), "cuCall") is None
    assert rt.check_driver_result((0, 7), "cuCall") == 7
    assert rt.check_driver_result((0, 7, 8), "cuCall") == (7, 8)
    with pytest.raises(
        rt.CUDAError, match=r"^cuMemAlloc failed: CUDA_ERROR_INVALID_VALUE \(1\)"
    ) as info:
        rt.check_driver_result((Result(1), None), "cuMemAlloc")
    assert (info.value.call, info.value.name, info.value.code) == (
        "cuMemAlloc",
        "CUDA_ERROR_INVALID_VALUE",
        1,
    )


def test_a_bad_ring_shape_is_one_error_type_wherever_it_is_given() -> None:
    from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher

    makers = [
        lambda: rt.RingLayout(0, 64),
        lambda: rt.DispatcherConfig(num_slots=0),
        lambda: rt.HostRingBridge(0, 64),
        lambda: HostDispatcher(num_slots=0),
    ]
    for make in makers:
        with pytest.raises(
            rt.InvalidArgumentError, match=r"num_slots=0: a ring needs at least 1 slot"
        ):
            make()
    for make in (lambda: rt.RingLayout(2, 100), lambda: rt.DispatcherConfig(slot_size=100)):
        with pytest.raises(
            rt.InvalidArgumentError, match="slot_size=100: slot_size must be a multiple of 8"
        ):
            make()
