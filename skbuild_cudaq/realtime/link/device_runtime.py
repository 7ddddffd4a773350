"""The device run time every link adds to a binary's code.

skbuild-cudaq's own set (the built-in kernels and the host-ring bridge's hooks, LTO-IR; one set
per CUDA major, the installed nvJitLink's: :func:`runtime_dir`, :func:`runtime_device_code`),
and CUDA's device runtime ``libcudadevrt.a`` (:func:`find_device_runtime`), which nvJitLink links
into the module of a dispatcher that serves graph handlers (device-side ``cudaGraphLaunch``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from skbuild_cudaq._cuda_majors import cuda_major, cuda_majors, default_major
from skbuild_cudaq._paths import device_runtime_dir, device_runtime_sets
from skbuild_cudaq.fatbin import read_fatbin_file
from skbuild_cudaq.realtime.errors import DeviceCodeError, DeviceRuntimeNotFoundError
from skbuild_cudaq.realtime.link import _nvjitlink
from skbuild_cudaq.realtime.link._binary import bridge_files
from skbuild_cudaq.realtime.link.device_code import DeviceCode, LinkInput, LinkLibrary

__all__ = [
    "DEVICE_RUNTIME_ENV",
    "GRAPH_RUNTIME_DIR",
    "HOST_RING_HOOKS",
    "UNIFIED_KERNELS",
    "find_device_runtime",
    "runtime_device_code",
    "runtime_dir",
]

#: Environment variable naming ``libcudadevrt.a`` explicitly (it must be of the CUDA
#: major of nvJitLink).
DEVICE_RUNTIME_ENV = "SKBUILD_CUDAQ_CUDADEVRT"


def _major_of_path(path: Path) -> int | None:
    text = path.as_posix()
    for facts in cuda_majors():
        if text.endswith(facts.device_runtime):
            return facts.major
    return None


def find_device_runtime(major: int | None = None) -> Path:
    """``libcudadevrt.a`` of CUDA ``major`` (default: the major of the installed nvJitLink).

    Device graph launch (``cudaGraphLaunch`` in device code) lives in the device runtime,
    a static library nvJitLink links as a ``LIBRARY`` input; it must be of nvJitLink's
    CUDA major. Searched, in order: ``$SKBUILD_CUDAQ_CUDADEVRT``; the ``nvidia-cuda-runtime``
    wheel of that major in every site-packages (CUDA 13: ``nvidia/cu13/lib``, CUDA 12
    ``nvidia-cuda-runtime-cu12``: ``nvidia/cuda_runtime/lib``); cuda-pathfinder's
    ``locate_static_lib("cudadevrt")`` where it finds one of that major; ``$CONDA_PREFIX/lib``.
    No CUDA toolkit is needed. Raises :class:`DeviceRuntimeNotFoundError` saying what to
    install.
    """
    override = os.environ.get(DEVICE_RUNTIME_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            msg = f"{DEVICE_RUNTIME_ENV}={override}: no such file (expected libcudadevrt.a)"
            raise DeviceRuntimeNotFoundError(msg)
        return path.resolve()
    if major is None:
        major = _nvjitlink.nvjitlink_major() or default_major()
    tried: list[str] = []
    facts = cuda_major(major)
    sub = facts.device_runtime if facts is not None else None
    if sub is not None:
        for site in _nvjitlink._site_packages():
            candidate = Path(site) / sub
            tried.append(str(candidate))
            if candidate.is_file():
                return candidate.resolve()
    with contextlib.suppress(Exception):  # an older cuda-pathfinder has no static libraries
        from cuda.pathfinder import locate_static_lib

        located = Path(locate_static_lib("cudadevrt").abs_path)
        if _major_of_path(located) in (None, major):
            return located.resolve()
        tried.append(f"{located} (cuda-pathfinder; CUDA {_major_of_path(located)})")
    conda = os.environ.get("CONDA_PREFIX")
    if conda:
        candidate = Path(conda) / "lib" / "libcudadevrt.a"
        tried.append(str(candidate))
        if candidate.is_file():
            return candidate.resolve()
    spec = (
        f"'{facts.within(facts.runtime_wheel)}'"
        if facts is not None
        else f"the CUDA {major} device runtime"
    )
    msg = (
        f"no device runtime (libcudadevrt.a) of CUDA {major}, which graph handlers "
        f"(GRAPH_LAUNCH entries) need on the device path: pip install {spec} (or set "
        f"{DEVICE_RUNTIME_ENV} to the file); looked in: {', '.join(tried) or 'nowhere'}"
    )
    raise DeviceRuntimeNotFoundError(msg)


#: The host-ring bridge's hooks in the device run time, which a bridge of your
#: own replaces (see :func:`runtime_device_code`).
HOST_RING_HOOKS = "host_ring_bridge.fatbin"


#: The file of the built-in unified kernels, in every module but the graph module, whose
#: kernel is the graph dispatch kernel. Left out there, their 1024-thread build cannot refuse
#: the link, as it did on nvJitLink 13.0 with the device runtime as a LIBRARY input (ptxas
#: refused its direct calls to example_app's Python handlers, 69 to 110 registers against
#: 64), while the plain module of the same binary links.
UNIFIED_KERNELS = "unified_dispatch_kernel.fatbin"


#: The subdirectory of a device run-time set holding the graph dispatch kernel, linked
#: (with the device runtime) only for dispatchers that serve graph handlers.
GRAPH_RUNTIME_DIR = "graph"


def runtime_dir() -> Path:
    """The device run-time set this process links with: the set of the installed
    nvJitLink's CUDA major (:func:`skbuild_cudaq.device_runtime_dir` of it; LTO-IR links
    only with an nvJitLink of its own major), found without loading nvJitLink."""
    return device_runtime_dir(_nvjitlink.nvjitlink_major())


def runtime_device_code(
    directory: str | os.PathLike[str] | None = None,
    bridge: Iterable[str | os.PathLike[str]] | None = None,
    *,
    graph_launch: bool = False,
) -> DeviceCode:
    """skbuild-cudaq's own device run time: built-in kernel and bridge hooks (LTO-IR).

    ``bridge``: the device code (LTO-IR fatbins) of a bridge of your own; it
    replaces the host-ring hooks (``host_ring_bridge.fatbin``) and the built-in
    kernel stays. None: the host-ring hooks. ``graph_launch``: the graph dispatch kernel
    (``graph/*.fatbin``) instead of the built-in unified kernels, and the device runtime it calls
    (``libcudadevrt.a`` of the set's CUDA major, found by
    :func:`find_device_runtime`), a ``LIBRARY`` input.
    """
    root = Path(directory) if directory is not None else runtime_dir()
    files = sorted(root.glob("*.fatbin"))
    if not files and root.name.startswith("cu") and device_runtime_sets(root.parent):
        have = ", ".join(f"CUDA {m}" for m in device_runtime_sets(root.parent))
        major = root.name[2:]
        msg = (
            f"skbuild-cudaq's device run time was built for {have}, not for CUDA {major} like "
            f"the installed nvJitLink (no {root}): install the stack of a built major, e.g. "
            f"pip install 'skbuild-cudaq[cu{max(device_runtime_sets(root.parent))}]', or "
            f"reinstall skbuild-cudaq from source with nvidia-cuda-nvrtc of CUDA {major} in "
            "its build environment (its build-system.requires pins both majors)"
        )
        raise DeviceCodeError(msg)
    if not files:
        from skbuild_cudaq._paths import source_tree_hint

        msg = source_tree_hint() or (
            f"no device run time (*.fatbin) in {root}: reinstall skbuild-cudaq "
            "(the wheel ships skbuild_cudaq/_device/cu<major>/*.fatbin)"
        )
        raise DeviceCodeError(msg)
    own = bridge_files(bridge)
    if own is not None:
        files = [f for f in files if f.name != HOST_RING_HOOKS]
        for file in own:
            if not file.is_file():
                msg = f"the bridge's device code {file} does not exist (expected an LTO-IR fatbin)"
                raise DeviceCodeError(msg)
        files += own
    libraries: tuple[LinkLibrary, ...] = ()
    if graph_launch:
        graph = sorted((root / GRAPH_RUNTIME_DIR).glob("*.fatbin"))
        if not graph:
            msg = (
                f"no graph dispatch kernel (*.fatbin) in {root / GRAPH_RUNTIME_DIR}: this "
                "skbuild-cudaq was built without it; reinstall skbuild-cudaq"
            )
            raise DeviceCodeError(msg)
        files = [f for f in files if f.name != UNIFIED_KERNELS] + graph
        digits = root.name[2:]
        devrt = find_device_runtime(int(digits) if digits.isdigit() else None)
        libraries = (LinkLibrary(devrt.name, devrt, devrt.read_bytes()),)
    inputs = []
    for file in files:
        for number, container in enumerate(read_fatbin_file(file)):
            inputs.append(LinkInput(f"{file.name}:{number}", container))
    return DeviceCode(root, tuple(inputs), libraries)
