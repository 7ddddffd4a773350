"""Every error of the run time, in one place (link, load, lookups, launches, rings,
wire format, dispatchers, the UDP feeder): the ground of the run time, importing nothing of
the package but the base class (:mod:`skbuild_cudaq.errors`).

Every class derives from :class:`skbuild_cudaq.errors.CudaqError` through
:class:`RealtimeError`; all are exported from :mod:`skbuild_cudaq.realtime`.
:class:`InvalidArgumentError` (and so a bad ring shape) is also a ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Iterable

from skbuild_cudaq.errors import CudaqError, DeviceCodeError

__all__ = [
    "CUDAError",
    "ClientError",
    "DeviceCodeError",
    "DeviceRuntimeNotFoundError",
    "HostDispatcherError",
    "InvalidArgumentError",
    "LibraryConflictError",
    "LinkCacheError",
    "LinkError",
    "NoDeviceError",
    "NotBuiltError",
    "ProtocolError",
    "RealtimeError",
    "RingError",
    "RingProtocolError",
    "UdpFeederError",
    "VersionMismatchError",
    "WrongTypeError",
]


class RealtimeError(CudaqError):
    """Base class of the run time's errors."""


class LinkError(RealtimeError):
    """nvJitLink failed (or an input cannot be linked for the requested architecture).

    ``log`` is nvJitLink's error log (empty when the problem was found before
    nvJitLink ran); ``result`` the nvJitLink result name, e.g. ``ERROR_PTX_COMPILE``.
    The log is part of ``str(error)``.
    """

    def __init__(self, message: str, log: str = "", result: str | None = None) -> None:
        self.message = message
        self.log = log.strip()
        self.result = result
        text = message
        if result:
            text += f" [{result}]"
        if self.log:
            text += "\nnvJitLink log:\n" + "\n".join(f"  {line}" for line in self.log.splitlines())
        super().__init__(text)


class VersionMismatchError(LinkError):
    """LTO-IR and nvJitLink come from CUDA versions that cannot be linked together."""


class CUDAError(RealtimeError):
    """A CUDA driver call failed: ``name`` (e.g. ``CUDA_ERROR_INVALID_VALUE``) and ``code``."""

    def __init__(self, call: str, name: str, code: int, description: str = "") -> None:
        self.call = call
        self.name = name
        self.code = code
        self.description = description
        text = f"{call} failed: {name} ({code})"
        if description:
            text += f": {description}"
        super().__init__(text)


class NoDeviceError(RealtimeError):
    """No CUDA GPU can be used in this process: no NVIDIA driver library, or the driver sees
    no device (``cuInit``'s ``CUDA_ERROR_NO_DEVICE``). Raised by the first call that needs
    the GPU; a test that needs one skips on it (a broken wheel or a failed link is another
    error, and fails)."""


class InvalidArgumentError(RealtimeError, ValueError):
    """A name was not found in the linked module; ``available`` lists what exists,
    ``left_out`` the binary's containers left out of the link for this GPU (no code for it:
    a name defined there is unavailable here; see
    :attr:`~skbuild_cudaq.realtime.link.linker.LinkResult.left_out`)."""

    def __init__(
        self, message: str, available: Iterable[str] = (), left_out: Iterable[object] = ()
    ) -> None:
        self.available = tuple(available)
        self.left_out = tuple(left_out)
        super().__init__(message)


class WrongTypeError(InvalidArgumentError, TypeError):
    """A public function was called with an argument of the wrong type: the message names
    the function, the parameter, what was passed and what to pass. Both an
    :class:`InvalidArgumentError` (a ``ValueError``) and a ``TypeError``."""


class NotBuiltError(RealtimeError, ImportError):
    """A compiled part of the run time (the host path's ``_native`` module) is missing: the
    package was imported from an unbuilt source checkout, or installed without it. Also an
    ``ImportError``: it is raised by the import that found the part missing."""


class LibraryConflictError(RealtimeError):
    """A lookup names a binary other than the one already linked in this process.

    The dispatch kernel and the handlers of one dispatcher must come from one
    module; call :func:`skbuild_cudaq.realtime.release_library` to switch.
    """


class DeviceRuntimeNotFoundError(LinkError):
    """No device runtime (``libcudadevrt.a``) of nvJitLink's CUDA major, which graph
    handlers need: install the ``nvidia-cuda-runtime`` wheel of that major."""


class LinkCacheError(RealtimeError):
    """The link cache directory, or a directory or link on its path, is unsafe or unusable."""


class ProtocolError(RealtimeError):
    """A message does not follow the wire format (too short, wrong magic, id not echoed, ...)."""


class ClientError(RealtimeError):
    """Misuse of a client, a :class:`~skbuild_cudaq.realtime.RingClient` or a
    :class:`~skbuild_cudaq.realtime.UdpClient` alike: used after ``close()``, a ticket whose
    response was already collected (or forgotten by ``UdpClient.discard()``, or that
    predates ``RingClient.reset()``)."""


class RingError(RealtimeError):
    """Misuse of a ring (bad buffer, another producer on it, publish without poll, ...)."""


class RingProtocolError(RingError):
    """The other side of a ring broke the protocol (bad response magic, id not echoed, ...)."""


class HostDispatcherError(RealtimeError):
    """Misconfiguration of a :class:`HostDispatcher` (duplicate function id, ...)."""


class UdpFeederError(RealtimeError):
    """The UDP feeder could not start, or its thread failed."""
