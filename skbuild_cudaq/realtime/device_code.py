"""The device code of a binary (twin of ``cudaq_device_code_of_this_binary``).

A :class:`DeviceCode` holds every fatbin container of a binary's
``__nv_relfatbin`` sections, each kept separate: nvJitLink must be given each
container as its own ``FATBIN`` input (the whole section as one input silently
links only the first container). Pure Python: no CUDA.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from skbuild_cudaq._paths import device_runtime_dir, device_runtime_sets
from skbuild_cudaq.fatbin import FatbinContainer, read_fatbin_file, read_relfatbin_sections

from ._binary import binary_path, bridge_files
from .errors import DeviceCodeError

__all__ = [
    "GRAPH_RUNTIME_DIR",
    "HOST_RING_HOOKS",
    "DeviceCode",
    "LinkInput",
    "LinkLibrary",
    "binary_path",
    "bridge_files",
    "container_sources",
    "device_code_of",
    "runtime_device_code",
    "runtime_dir",
]


@dataclass(frozen=True)
class LinkInput:
    """One nvJitLink ``FATBIN`` input: a container and a name for messages."""

    name: str
    container: FatbinContainer


@dataclass(frozen=True)
class LinkLibrary:
    """One nvJitLink ``LIBRARY`` input: a static library (the device runtime)."""

    name: str
    path: Path
    data: bytes


@dataclass(frozen=True)
class DeviceCode:
    """Every fatbin container of one binary (or of the package's run time)."""

    path: Path
    inputs: tuple[LinkInput, ...]
    #: static libraries linked too (with graph launch, the device runtime ``libcudadevrt.a``)
    libraries: tuple[LinkLibrary, ...] = ()

    @property
    def containers(self) -> tuple[FatbinContainer, ...]:
        return tuple(i.container for i in self.inputs)


def device_code_of(binary: ModuleType | str | os.PathLike[str]) -> DeviceCode:
    """Device code of an extension module (object or path): every container of every section."""
    path = binary_path(binary)
    inputs = []
    for section in read_relfatbin_sections(path):
        for number, container in enumerate(section.containers):
            name = f"{path.name}:{section.index}:{number}"
            inputs.append(LinkInput(name, container))
    return DeviceCode(path, tuple(inputs))


def container_sources(code: DeviceCode) -> dict[str, str]:
    """The source each container of ``code`` was built from, by input name, as the build
    recorded it (section ``__cudaq_rt_info``; see ``inspect``). Containers without a record
    are left out; a binary whose records cannot be read gives none. For messages: it hashes
    every container, so it is not on the lookup path.
    """
    from skbuild_cudaq.build._device_info import container_digest, read_records

    try:
        records = read_records(code.path)
    except DeviceCodeError:
        return {}
    by_digest = {
        str(digest): str(record.get("source"))
        for record in records
        for digest in record.get("containers", [])
    }
    if not by_digest:
        return {}
    named = ((i.name, by_digest.get(container_digest(i.container.data))) for i in code.inputs)
    return {name: source for name, source in named if source}


#: The host-ring bridge's hooks in the device run time, which a bridge of your
#: own replaces (see :func:`runtime_device_code`).
HOST_RING_HOOKS = "host_ring_bridge.fatbin"


#: The subdirectory of a device run-time set holding the graph dispatch kernel, linked
#: (with the device runtime) only for dispatchers that serve graph handlers.
GRAPH_RUNTIME_DIR = "graph"


def runtime_dir() -> Path:
    """The device run-time set this process links with: the set of the installed
    nvJitLink's CUDA major (:func:`skbuild_cudaq.device_runtime_dir` of it; LTO-IR links
    only with an nvJitLink of its own major), found without loading nvJitLink."""
    from ._nvjitlink import nvjitlink_major

    return device_runtime_dir(nvjitlink_major())


def runtime_device_code(
    directory: str | os.PathLike[str] | None = None,
    bridge: Iterable[str | os.PathLike[str]] | None = None,
    *,
    graph_launch: bool = False,
) -> DeviceCode:
    """skbuild-cudaq's own device run time: built-in kernel and bridge hooks (LTO-IR).

    ``bridge``: the device code (LTO-IR fatbins) of a bridge of your own; it
    replaces the host-ring hooks (``host_ring_bridge.fatbin``) and the built-in
    kernel stays. None: the host-ring hooks. ``graph_launch``: also the graph
    dispatch kernel (``graph/*.fatbin``) and the device runtime it calls
    (``libcudadevrt.a`` of the set's CUDA major, found by
    :func:`~skbuild_cudaq.realtime.graph.find_device_runtime`), a ``LIBRARY`` input.
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
        files += graph
        from .graph import find_device_runtime

        digits = root.name[2:]
        devrt = find_device_runtime(int(digits) if digits.isdigit() else None)
        libraries = (LinkLibrary(devrt.name, devrt, devrt.read_bytes()),)
    inputs = []
    for file in files:
        for number, container in enumerate(read_fatbin_file(file)):
            inputs.append(LinkInput(f"{file.name}:{number}", container))
    return DeviceCode(root, tuple(inputs), libraries)
