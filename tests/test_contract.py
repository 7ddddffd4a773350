"""Every public contract name, exactly as the product spells it.

The names users write in their code, build files and command lines: the build backend and the
``[tool.cudaq]`` table, the CMake package, the device header and the native host handlers'
header, the run-time lookups, the wire constants, the command lines and their markers, and
the wire benchmark's goal keys. A rename of any of them breaks downstream projects, so each is
pinned here by its exact spelling (and the C declarations by their exact signatures, compiled
against the shipped headers).
"""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import skbuild_cudaq
from skbuild_cudaq import _paths

ROOT = Path(__file__).resolve().parents[1]

#: The device-side contract, as the spec writes it: compiled after the shipped header, each
#: declaration must match the header's (a different return or parameter type is an error),
#: each constant must have its value and the function-table entry its layout.
DEVICE_CONTRACT = """\
#include <cudaq/realtime/unified_dispatch_device.cuh>
#include <cstddef>
#include <type_traits>

extern "C" __device__ void *cudaq_dev_enter_kernel(void *transport_ctx,
                                                  volatile int *shutdown_flag);
extern "C" __device__ int cudaq_dev_rx_poll(void *session, void **request, void **response);
extern "C" __device__ void cudaq_dev_tx_publish(void *session, void *response);

typedef int (*cudaq_device_handler_t)(const void *args, uint32_t arg_len, void *result,
                                      uint32_t max_result_len, uint32_t *result_len);

__device__ const cudaq_function_entry_t *unified_lookup_entry(const cudaq_function_entry_t *table,
                                                              uint32_t count, uint32_t function_id);
__device__ void write_response_header(void *response, const void *request, int32_t status,
                                      uint32_t result_len);

static_assert(sizeof(cudaq_function_entry_t) == 16, "entry size");
static_assert(offsetof(cudaq_function_entry_t, handler) == 0, "handler");
static_assert(std::is_same<decltype(cudaq_function_entry_t::handler),
                           cudaq_device_handler_t>::value, "handler type");
static_assert(offsetof(cudaq_function_entry_t, function_id) == 8, "function_id");
static_assert(std::is_same<decltype(cudaq_function_entry_t::function_id), uint32_t>::value, "id");
static_assert(offsetof(cudaq_function_entry_t, dispatch_mode) == 12, "dispatch_mode");
static_assert(std::is_same<decltype(cudaq_function_entry_t::dispatch_mode), uint8_t>::value, "m");
static_assert(offsetof(cudaq_function_entry_t, reserved) == 13, "reserved");
static_assert(sizeof(cudaq_function_entry_t::reserved) == 3, "reserved[3]");
static_assert(CUDAQ_DISPATCH_DEVICE_CALL == 0, "DEVICE_CALL");
static_assert(CUDAQ_DISPATCH_GRAPH_LAUNCH == 1, "GRAPH_LAUNCH");
static_assert(CUDAQ_DISPATCH_HOST_CALL == 2, "HOST_CALL");

extern "C" __device__ int contract_handler(const void *args, uint32_t arg_len, void *result,
                                           uint32_t max_result_len, uint32_t *result_len) {
  *result_len = 0;
  return 0;
}
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(contract_handler);

// Every dispatch kernel, built-in or custom, takes these parameters in this order.
extern "C" __global__ void my_dispatcher(void *transport_ctx, uint32_t slot_size,
    const cudaq_function_entry_t *table, uint32_t table_count,
    volatile int *shutdown_flag, unsigned long long *stats) {
  void *session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  void *request = nullptr;
  void *response = nullptr;
  while (session != nullptr && cudaq_dev_rx_poll(session, &request, &response)) {
    const cudaq_function_entry_t *e = unified_lookup_entry(table, table_count, 0);
    write_response_header(response, request, e ? 0 : -2, 0);
    cudaq_dev_tx_publish(session, response);
    ++*stats;
  }
}
"""

HOST_CONTRACT = """\
#include <cudaq/realtime/host_handler.h>

int contract_host(const void *args, uint32_t arg_len, void *result, uint32_t max_result_len,
                  uint32_t *result_len) {
  (void)args; (void)arg_len; (void)result; (void)max_result_len;
  *result_len = 0;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(contract_host);
"""


def test_the_headers_ship_at_their_contract_paths() -> None:
    include = Path(_paths.include_dir())
    assert (include / "cudaq" / "realtime" / "unified_dispatch_device.cuh").is_file()
    assert (include / "cudaq" / "realtime" / "host_handler.h").is_file()


@pytest.mark.toolchain
def test_device_header_declares_the_contract_exactly(tmp_path: Path, nvcc: Path) -> None:
    source = tmp_path / "contract.cu"
    source.write_text(DEVICE_CONTRACT)
    proc = subprocess.run(
        [str(nvcc), "-c", "-rdc=true", "-std=c++17", "-arch=sm_80",
         f"-I{_paths.include_dir()}", "-o", str(tmp_path / "contract.o"), str(source)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.toolchain
def test_host_handler_header_declares_the_contract_exactly(tmp_path: Path) -> None:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    source = tmp_path / "contract.c"
    source.write_text(HOST_CONTRACT)
    proc = subprocess.run(
        [cc, "-c", "-std=c11", "-Wall", "-Werror", f"-I{_paths.include_dir()}",
         "-o", str(tmp_path / "contract.o"), str(source)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_run_time_lookups_and_dispatcher_names() -> None:
    import skbuild_cudaq.realtime as rt

    for name in ("get_device_kernel", "get_device_handler", "get_host_handler"):
        assert name in rt.__all__
        params = list(inspect.signature(getattr(rt, name)).parameters)
        assert params[:2] == ["module", "name"], (name, params)
    for name in ("Dispatcher", "DispatcherConfig", "FunctionTable", "HostDispatcher"):
        assert name in rt.__all__
    launch = inspect.signature(rt.Dispatcher.set_unified_launch).parameters
    assert list(launch)[1:] == ["launcher", "transport_ctx"]
    assert launch["transport_ctx"].default is None
    for cls in (rt.Dispatcher, rt.HostDispatcher):
        for method in ("start", "stop", "__enter__", "__exit__"):
            assert callable(getattr(cls, method)), (cls, method)


def test_dispatch_modes_wire_and_fatbin_constants() -> None:
    from skbuild_cudaq import fatbin
    from skbuild_cudaq.realtime import wire
    from skbuild_cudaq.realtime.dispatcher import table

    assert (table.DEVICE_CALL, table.GRAPH_LAUNCH, table.HOST_CALL) == (0, 1, 2)
    assert (wire.REQUEST_MAGIC, wire.RESPONSE_MAGIC, wire.HEADER_SIZE) == (
        0x43555152,
        0x43555153,
        24,
    )
    assert (wire.FNV1A_32_BASIS, wire.FNV1A_32_PRIME) == (2166136261, 16777619)
    assert (
        wire.STATUS_SUCCESS,
        wire.STATUS_BAD_MAGIC,
        wire.STATUS_UNKNOWN_FUNCTION,
        wire.STATUS_ARGS_TOO_LONG,
    ) == (0, -1, -2, -3)
    assert fatbin.CONTAINER_MAGIC == 0xBA55ED50
    assert fatbin.SECTION_NAME == "__nv_relfatbin"
    assert {1: "ptx", 2: "cubin", 8: "lto-ir"}.items() <= fatbin.KIND_NAMES.items()


def test_build_backend_table_and_schema_entry_point(tmp_path: Path) -> None:
    import skbuild_cudaq.build as backend
    from skbuild_cudaq.settings import load_settings

    for hook in ("build_wheel", "build_sdist", "get_requires_for_build_wheel"):
        assert callable(getattr(backend, hook)), hook
    (tmp_path / "src").mkdir()
    for name in ("my_dispatcher.cu", "a.cu"):
        (tmp_path / "src" / name).write_text('extern "C" __global__ void k() {}\n')
    (tmp_path / "pyproject.toml").write_text(
        '[tool.cudaq.dispatch-kernels]\n_core = ["src/my_dispatcher.cu"]\n'
        'other = { sources = ["src/a.cu"], architectures = ["80"] }\n'
    )
    kernels = load_settings(tmp_path / "pyproject.toml").dispatch_kernels
    assert kernels["_core"].sources == ("src/my_dispatcher.cu",)
    assert (kernels["other"].sources, kernels["other"].architectures) == (("src/a.cu",), ("80",))
    schema = [e for e in entry_points(group="validate_pyproject.tool_schema") if e.name == "cudaq"]
    assert len(schema) == 1 and callable(schema[0].load())


def test_cmake_package_names() -> None:
    config = Path(skbuild_cudaq.cmake_dir()) / "skbuild_cudaqConfig.cmake"
    text = config.read_text()
    assert "function(cudaq_realtime_add_dispatch_kernel target)" in text
    assert 'cmake_parse_arguments(PARSE_ARGV 2 ARG "" "" "ARCHITECTURES")' in text
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "--cmake-dir"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(proc.stdout.strip()) == config.parent


def _options(parser: object) -> set[str]:
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    return {opt for action in parser._actions for opt in action.option_strings}


def test_command_lines() -> None:
    from skbuild_cudaq import cli
    from skbuild_cudaq.cli import server as server_cli

    main = cli._build_parser()
    assert "--cmake-dir" in _options(main)
    commands = next(a for a in main._actions if a.dest == "command")
    assert "check" in commands.choices  # type: ignore[operator]
    server = server_cli._build_parser()
    spec = {"--path", "--dispatch", "--dispatcher", "--transport", "--num-slots", "--slot-size",
            "--timeout", "--module", "--handlers", "--grid", "--block", "--cluster",
            "--cooperative"}  # fmt: skip
    assert spec <= _options(server), spec - _options(server)
    choices = {a.dest: a.choices for a in server._actions if a.choices}
    assert set(choices["path"]) == {"device", "host"}
    assert "unified" in choices["dispatch"]
    assert set(choices["transport"]) == {"udp", "host-ring"}
    assert (server_cli.READY, server_cli.PROCESSED) == (
        "CUDAQ_REALTIME_SERVER_READY",
        "CUDAQ_REALTIME_SERVER_PROCESSED",
    )
    scripts = {e.name for e in entry_points(group="console_scripts")}
    assert {"skbuild-cudaq", "cudaq-realtime-test-server"} <= scripts


def test_wire_benchmark_goal_keys() -> None:
    goals = json.loads((ROOT / "bench" / "results" / "wire.json").read_text())["goals"]
    spec = [
        "udp_device_p50_over_floor",
        "udp_host_native_p50_over_floor",
        "udp_host_python_p50_over_floor",
        "host_native_p50_over_floor",
        "host_python_p50_us",
    ]
    assert set(spec) <= set(goals), set(spec) - set(goals)
    source = (ROOT / "bench" / "wire.py").read_text()
    assert all(f'"{key}"' in source for key in spec)
