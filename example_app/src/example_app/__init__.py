"""example_app: a downstream project of skbuild-cudaq.

Its extension module :mod:`example_app._core` carries device code only:

* RPC handlers ``rpc_increment`` (adds one to each byte), ``echo`` and the
  block-cooperative ``block_reverse``, ordinary CUDA sources of the extension
  compiled by nvcc with relocatable device code to LTO-IR, exported with
  ``CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION``;
* custom dispatch kernels, each compiled on its own to LTO-IR and embedded:
  ``single_thread_dispatcher``, ``cooperative_grid_dispatcher`` and
  ``warp_parallel_dispatcher`` (declared in ``[tool.cudaq.dispatch-kernels]``)
  and ``cluster_dispatcher`` (sm_90+, declared with the CMake one-liner);
  :mod:`example_app.launchers` holds a launcher for each.

``skbuild_cudaq.realtime`` reads both from the module's file and links them with
nvJitLink on the GPU present. Importing this package needs no GPU.
"""

from __future__ import annotations

from . import _core

__all__ = ["DISPATCH_KERNELS", "HANDLERS", "core_module"]

#: Names of the exported RPC handlers (``get_device_handler(_core, name)``).
HANDLERS: tuple[str, ...] = tuple(_core.HANDLERS)
#: Names of the dispatch kernels in the binary (``get_device_kernel(_core, name)``).
DISPATCH_KERNELS: tuple[str, ...] = tuple(_core.DISPATCH_KERNELS)
#: The extension module whose binary holds the device code.
core_module = _core
