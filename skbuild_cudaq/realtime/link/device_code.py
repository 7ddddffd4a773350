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

from skbuild_cudaq.fatbin import FatbinContainer, FatbinSection, read_relfatbin_sections
from skbuild_cudaq.realtime.errors import DeviceCodeError
from skbuild_cudaq.realtime.link._binary import binary_path, bridge_files

__all__ = [
    "DeviceCode",
    "LinkInput",
    "LinkLibrary",
    "binary_path",
    "bridge_files",
    "container_sources",
    "device_code_of",
    "device_code_of_sections",
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
    return device_code_of_sections(path, read_relfatbin_sections(path))


def device_code_of_sections(path: Path, sections: Iterable[FatbinSection]) -> DeviceCode:
    """The device code of the binary at ``path`` from its ``__nv_relfatbin`` sections, already
    read (``check`` reads every section it needs in one pass)."""
    inputs = []
    for section in sections:
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
    from skbuild_cudaq._records import container_digest, read_records

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
