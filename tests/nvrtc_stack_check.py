"""Build example_app's device code and skbuild-cudaq's device run time with the NVRTC of
this environment, link them with its nvJitLink for sm_80, sm_90 and sm_100, and print a
JSON report. Run in a virtual environment of one CUDA major (tests/test_nvrtc.py runs it
in the test venv for CUDA 13 and in a venv of cu12 wheels for CUDA 12), with the
worktree on PYTHONPATH::

    PYTHONPATH=<repo> python tests/nvrtc_stack_check.py OUTDIR [--nvcc-runtime DIR]

``--nvcc-runtime DIR``: also try to link against that (nvcc-built) device run time and
report how the version check answers (expected: refused up front across majors).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "example_app" / "src"
ARCHS = ("sm_80", "sm_90", "sm_100")
#: example_app sources and the architectures they are built for (the cluster kernel is sm_90+).
APP_SOURCES = {
    "single_thread_dispatcher.cu": ("80",),
    "warp_parallel_dispatcher.cu": ("80",),
    "cooperative_grid_dispatcher.cu": ("80",),
    "cluster_dispatcher.cu": ("90",),
    "handlers.cu": ("80",),
    "block_handlers.cu": ("80",),
    "graph_handlers.cu": ("80",),
}
EXPECTED = (
    "single_thread_dispatcher",
    "warp_parallel_dispatcher",
    "cooperative_grid_dispatcher",
    "cudaq_realtime_unified_dispatch",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--nvcc-runtime", type=Path)
    args = parser.parse_args(argv)

    from skbuild_cudaq import include_dir
    from skbuild_cudaq.build._nvrtc import compile_file, find_nvrtc
    from skbuild_cudaq.fatbin import read_fatbin_file
    from skbuild_cudaq.realtime.errors import VersionMismatchError
    from skbuild_cudaq.realtime.library import cubin_symbols
    from skbuild_cudaq.realtime.link import _nvjitlink
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.device_code import DeviceCode, LinkInput
    from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

    nvrtc = find_nvrtc()
    runtime_dir = args.out / "runtime"
    app_dir = args.out / "app"
    for name in ("unified_dispatch_kernel.cu", "hook_defaults.cu", "host_ring_bridge.cu"):
        source = ROOT / "skbuild_cudaq" / "device" / name
        compile_file(
            source,
            runtime_dir / name.replace(".cu", ".fatbin"),
            architectures=["80"],
            include_dirs=[include_dir()],
            nvrtc=nvrtc,
        )
    inputs = []
    versions = set()
    for name, archs in APP_SOURCES.items():
        out = app_dir / name.replace(".cu", ".fatbin")
        compile_file(
            APP / name, out, architectures=archs, include_dirs=[include_dir()], nvrtc=nvrtc
        )
        for number, container in enumerate(read_fatbin_file(out)):
            inputs.append(LinkInput(f"{out.name}:{number}", container))
            versions.update(e.code_version_str for e in container.entries)
    report: dict[str, object] = {
        "nvrtc": list(nvrtc.version),
        "nvjitlink": list(_nvjitlink.nvjitlink_version()),
        "code_versions": sorted(versions),
        "links": {},
    }
    links: dict[str, object] = {}
    for arch in ARCHS:
        # the link leaves the cluster kernel (lto_90) out for sm_80
        code = DeviceCode(app_dir / "example_app", tuple(inputs))
        result = link_device_code(
            code, LinkOptions(arch=arch, runtime_dir=runtime_dir), cache=LinkCache(None)
        )
        symbols = cubin_symbols(result.cubin)
        links[arch] = {
            "size": len(result.cubin),
            "missing": [n for n in EXPECTED if n not in symbols.kernels],
            "cluster": "cluster_dispatcher" in symbols.kernels,
            "handlers": list(symbols.handlers),
            "undefined": list(symbols.undefined),
        }
    report["links"] = links
    if args.nvcc_runtime is not None:
        code = DeviceCode(app_dir / "example_app", tuple(inputs))
        try:
            link_device_code(
                code,
                LinkOptions(arch="sm_90", runtime_dir=args.nvcc_runtime),
                cache=LinkCache(None),
            )
        except VersionMismatchError as exc:
            report["nvcc_runtime"] = {"refused": True, "message": str(exc), "log": exc.log}
        else:
            report["nvcc_runtime"] = {"refused": False}
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
