"""Where a round trip's microseconds go: the device run time's measurement build.

One run on one GPU::

    python bench/phases.py [--out bench/results/phases.json]

Compiles, in this script, the device run time (built-in kernel, host-ring hooks)
and example_app's dispatch kernels and handlers with ``-DCUDAQ_REALTIME_PHASES``
(the measurement build of ``cudaq/realtime/unified_dispatch_device.cuh``), plus a
bare ping-pong floor stamped the same way, links them with nvJitLink into one
module and serves serial requests (32-byte arguments, one in flight) through
each dispatch shape and handler shape. Each request's phases are stamped with
the SM clock on the device:

    0 seen -> 1 staged -> 2 looked up -> 3 handler done -> 4 header written -> 5 published

(the floor has no lookup or handler: its 2 and 3 are the end of its loads).
Other designs of the cluster and cooperative kernels' hand-off are served launch-wide
next to the example's (``cluster_barrier``, derived from the example at build time, and
``coop_counter`` in bench/handoff/: the examples' earlier hand-offs). The
probes, compiled here too, say what parts of a phase cost: ``probe_noread_thread``
(a thread-shaped handler that writes its result without reading its arguments)
and ``probe_smem_table_dispatcher`` (the single-thread loop with a hand-written
shared-memory lookup and no request checks); ``probe_serve_until`` is the built-in
kernel's leader loop in a one-thread kernel (``probe_serve_until_readback``: with its
session read back from shared memory; ``probe_builtin_loop``: inside the built-in
kernel's outer loop, no barriers), and ``builtin_1`` the built-in kernel launched on one
thread (what its block costs its thread-shaped path). The
report gives, per configuration, the round trip p50 seen by the host
(bench/loadgen.c), the median of each phase, the device's share (seen ->
published) and the rest (host write -> device sees, and published -> host
sees). Stamping costs a few device-memory stores per request: compare the
stamped floor with bench/dispatch.py's unstamped one.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dispatch as bench  # bench/dispatch.py: load generator, floors, versions

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "skbuild_cudaq" / "device"
INCLUDE = ROOT / "skbuild_cudaq" / "include"
EXAMPLE = ROOT / "example_app" / "src"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "phases.json"
PHASES = ("staged", "looked_up", "handler_done", "header_written", "published")
RECORDS = 65536
#: Random think time before each request of the second pass (see bench/dispatch.py).
GAP_NS = bench.GAP_NS
#: Ablations of the single-thread loop (FLOOR_CU): what each part of the handler phase costs.
ABLATIONS = ("ablation_nostats", "ablation_direct")
#: Candidate calls of the handler (FLOOR_CU), measured with echo_thread and naive_echo_thread.
VARIANTS = ("variant_aligned", "variant_stage")
#: variant_aligned's code under another name (another address in the module): a control
#: for the paired rows, whether the same instructions measure the same; and
#: ``variant_aligned_solo``, the same loop instantiated for it alone, so that its stage is
#: its own (declared in the kernel, laid out first in its shared memory, as the examples'
#: are) where the other two share one (declared in the module, laid out after the
#: bridge's sessions): whether that layout is what the examples pay (FLOOR_CU).
PLACEMENT = ("variant_aligned_copy", "variant_aligned_solo")
#: From stage_floor to the single-thread dispatcher, one feature a rung (FLOOR_CU).
LADDER = (
    "ladder_bridge",
    "ladder_validate",
    "ladder_stats",
    "ladder_call",
    "ladder_switch",
    "ladder_switch_one",
    "ladder_switch_one_closed",
    "ladder_switch_id",
    "ladder_switch_id_shapes",
    "ladder_switch_id_three",
    "ladder_switch_id_generic",
    "ladder_switch_id_five",
    "ladder_switch_id_all",
)
#: Other designs of the multi-block kernels' hand-off (bench/handoff/*.cu), served with
#: the example's launch rule of the shape they vary, side by side with the example:
#: kernel -> (source, architecture, example shape).
HANDOFF = {
    "coop_counter_dispatcher": ("coop_counter.cu", "80", "cooperative_grid"),
}
HANDOFF_DIR = Path(__file__).resolve().parent / "handoff"


def _single_thread(
    replacements: list[tuple[str, str]],
) -> tuple[str, str, str, str, list[tuple[str, str]], dict[str, str]]:
    """A DERIVED entry of the single-thread example: its source with ``replacements``."""
    return (
        "single_thread_dispatcher.cu",
        "80",
        "single_thread",
        "single_thread_dispatcher",
        replacements,
        {},
    )


#: Probes derived from an example's source at build time, so that each stays the example
#: but for what it varies: kernel -> (example source, architecture, example shape whose
#: launch rule it uses, example kernel, [(text, replacement)] each found exactly once,
#: {prefix: renamed prefix} of its globals).
#:  - ``*_direct``: the multi-block examples with their launch-wide handler called by name
#:    -- ``echo``, a direct call LTO inlines -- instead of through the function table's
#:    pointer (launch-wide handlers are not in the module's handler switch): what a direct
#:    call would save them. They serve ``echo`` only.
#:  - ``*_launch_pointer``: the examples as before session 11, their launch-wide call
#:    through ``cudaq_call_handler`` (the thread-shaped switch, then the function table's
#:    pointer) instead of ``cudaq_call_launch_handler`` (the module's launch-wide switch, a
#:    direct call LTO inlines); ``single_thread_launch_pointer`` the same for the
#:    single-thread example's launch-wide handlers: what the launch-wide switch saves.
#:  - ``single_thread_generic``: the single-thread example with its thread-shaped call
#:    through the switch with no test of the request's address space (as the launch-wide call
#:    is): in session 11 the launch-wide ``echo`` through it measured 0.05-0.08 us faster than
#:    ``echo_thread`` through ``cudaq_call_handler``'s tested, shared-memory path;
#:  - ``cluster_push``: the cluster example with the leader pushing the mailbox into every
#:    block's own shared memory before the barrier, instead of every thread of the other
#:    blocks reading it from the leader's (distributed shared memory) after it, as
#:    bench/shape_floors.py's ``cluster_push_floor`` does bare;
#:  - ``coop_stage``: the cooperative example with its leader polling into a stage in its
#:    block's shared memory, as the other examples do (the example polls into device memory,
#:    so that every block can read a launch-wide request, and ``cudaq_call_handler`` then
#:    calls thread-shaped handlers through the pointer, not the switch), a launch-wide
#:    request copied out to device memory before the hand-off; served with both shapes;
#:  - ``cluster_barrier``: the cluster example with its earlier hand-off, two
#:    ``cluster.sync()`` a request (every thread arrives with release) instead of the split
#:    barriers (one releasing thread);
#:  - ``*_stageout``: the multi-block examples with a launch-wide handler's result staged on
#:    chip -- in the leader block's shared memory (cluster, through distributed shared
#:    memory) or a device-memory buffer (cooperative) -- and copied to the response slot by
#:    the leader after the collection, so that the blocks' releases (``MEMBAR.ALL.GPU``) wait
#:    for no stores to host memory; bench/shape_floors.py's ``*_stageout_floor`` bare;
#:  - ``single_thread_answer``: the single-thread example with its handler call and header
#:    write as one call, ``cudaq_answer_request`` (one address-space test; the header words
#:    and the arguments' length from registers; a launch-wide handler through the launch-wide
#:    switch only where both spaces are known, else the pointer), as the built-in kernel's
#:    leader loop and the warp-parallel example answer thread-shaped requests since session
#:    18. In session 18 run A the example written so measured 0.02x slower for the
#:    launch-wide ``echo`` (0 of 7 comparisons) and no different for ``echo_thread``;
#:  - ``single_thread_closed``: the single-thread example with a closed handler switch: a
#:    direct call for each of the module's handlers it serves and no pointer call for any
#:    other (answered as an unknown function), so that the kernel holds no indirect call (the
#:    ladder's rungs, with none, measure 0.1-0.14 us under it; with one, ptxas follows the
#:    call ABI throughout the kernel). What a switch closed over the module's exports -- a
#:    table that may hold only those -- would save;
#:  - ``single_thread_byname``: the single-thread example with a closed switch that takes no
#:    function's address: the entry's function id compared with each handler's name's and the
#:    handler called by name (the bench registers each under its own name). A kernel that
#:    compares a handler's address or calls through one has every address-taken function of
#:    the module appended to its code and a convergence barrier (``BSSY``/``BSYNC``) around
#:    each divergent branch (bench/sass.py: 99 in the example, 1 in ``ladder_call``): what a
#:    switch free of addresses would save;
#:  - ``single_thread_staged``: ``single_thread_byname`` with each handler inlined once: a request a
#:    bridge left outside shared memory is copied into the kernel's stage first (a response outside
#:    global memory, no bridge's, is answered as an unknown function). In the SASS (session 19) it
#:    keeps 41 of ``single_thread_byname``'s 48 convergence barriers, where the ladder's rung of the
#:    same five handlers inlined once (``ladder_switch_id_five``) has 5: the example's own code
#:    around the call has them too; ``single_thread_staged_answer``: the same with the response
#:    header written in the same call, under the same assumption of address spaces (the example
#:    writes it after, through ``write_response_header``'s own test): 5 convergence barriers in the
#:    SASS, the ladder's number (session 19). What a switch by case index, each handler inlined once
#:    and answered in one call, would save. Measured in session 20: 0.08-0.11 us under the example
#:    with ``echo_thread``, 0.02-0.04 us over it with the launch-wide ``echo``; as product code in
#:    example_app's module, worse on both (history, session 20 run E:
#:    bench/variants/single-thread-staged-byid.patch); ``single_thread_staged_hybrid``: the same for
#:    thread-shaped entries, a launch-wide one answered by name with generic pointers (as
#:    cudaq_call_launch_handler calls it): whether the launch-wide call keeps the example's cost
#:    (session 20: ``echo`` 0.05 us under the example, ``echo_thread`` and the naive handler back
#:    up);
#:  - ``single_thread_one``: the example with its test of the calling thread replaced by
#:    one of its launch's size (one thread, or return), which the compiler is then told: a
#:    launch-wide handler's stride (``cudaq_handler_size()``) becomes the constant 1, as a
#:    thread-shaped handler's is; ``single_thread_staged_one``: ``single_thread_staged_answer``
#:    with the same (session 20: neither faster than the probe it changes);
#:  - ``single_thread_thread_only``: the example serving thread-shaped handlers only, a
#:    launch-wide entry answered as an unknown function (its kernel then inlines no launch-wide
#:    handler: ``block_reverse``'s block barriers, the launch-wide switch and its pointer call
#:    go); ``single_thread_staged_thread_only``: ``single_thread_staged_answer`` the same way.
#:    What a one-thread example for thread-shaped handlers alone would save (session 21, own
#:    module: the staged one ``echo_thread`` +0.22 / +0.27 us over the floor against the
#:    example's +0.35 / +0.33, the naive handler +0.12 / +0.10 against +0.16 / +0.16 -- still
#:    over issue #12's lines; the one by address no better than the example);
#:  - ``single_thread_rebuilt``: the single-thread example unchanged but for its name (a
#:    control: the same source compiled again); ``single_thread_late_max``: with its
#:    ``max_result`` computed after entering the session, as until session 9. That order
#:    made nvcc schedule the claim's loads of the request otherwise than in
#:    ``variant_aligned`` (the same code through ``probe_loop``, measured 0.12 us faster in
#:    session 8), and, with it first, the loads are issued as there; what remains between
#:    the example and ``variant_aligned`` is the shared-memory layout (the stage first, the
#:    bridge's sessions last, against the other way round).
#: The DERIVED single-thread probes that serve thread-shaped handlers only (a launch-wide
#: entry is answered as an unknown function): served with the naive handler and echo_thread.
THREAD_ONLY_PROBES = ("single_thread_thread_only", "single_thread_staged_thread_only")
#: The DERIVED single-thread probes of how the handler is chosen and called (closed, by
#: name, staged), each served with the naive handler and the launch-wide echo too.
CHOICE_PROBES = (
    "single_thread_closed",
    "single_thread_byname",
    "single_thread_staged",
    "single_thread_staged_answer",
    "single_thread_staged_one",
    "single_thread_staged_hybrid",
)
_CALL = "cudaq_call_handler({}, request, response, max_result, &result_len)"
_LAUNCH_CALL = "cudaq_call_launch_handler({}, request, response, max_result, &result_len)"
_DIRECT = "cudaq_bench_direct_echo(request, response, max_result, &result_len)"
# The single-thread example's call of either shape, and its form before session 11.
_SHAPED_CALL = """      status = cache.shape == CUDAQ_HANDLER_SHAPE_THREAD
                   ? cudaq_call_handler(cache.handler, request, response, max_result, &result_len)
                   : cudaq_call_launch_handler(cache.handler, request, response, max_result,
                                               &result_len);
"""
_ONE_CALL = "      status = " + _CALL.format("cache.handler") + ";\n"
# single_thread_answer: the example's handler call and header write as one call.
_SHAPED_AND_HEADER = (
    "    if (status == CUDAQ_RPC_STATUS_SUCCESS)\n"
    + _SHAPED_CALL
    + "    write_response_header(response, request, status, result_len);\n"
)
_ANSWER = (
    "    cudaq_answer_request(cache.handler, cache.shape, status, request, response, max_result);\n"
)
# coop_stage: a launch-wide request that the leader's poll staged in its block's shared
# memory goes to the grid from device memory (one copy, ordered by the hand-off's release).
_COOP_COPY_OUT = """\
      if (running && request != nullptr && __isShared(request)) {
        const uint32_t words = (CUDAQ_RPC_HEADER_SIZE + cudaq_request_arg_len(request) + 7) / 8;
        for (uint32_t i = 0; i < words; ++i)
          g_coop_request[i] = static_cast<const uint64_t *>(request)[i];
        request = g_coop_request;
      }
"""
_LEADER_END = "      box->result_len = 0;\n    }\n"
# cluster_push: the leader copies the mailbox into every other block's own (remote stores,
# ordered by its release at the barrier); every block then reads its own shared memory.
_PUSH = """\
      for (unsigned int b = 1; b < cluster.num_blocks(); ++b) {
        volatile Mailbox *to = cluster.map_shared_rank(&local_box, b);
        to->running = box->running;
        to->entry = box->entry;
        to->request = box->request;
        to->response = box->response;
      }
"""
# *_stageout: the handler writes its result into an on-chip copy of the response when it
# fits, and the leader copies the result out before it writes the header.
_RESULT_LEN = "    uint32_t result_len = 0;\n"
_STAGED = (
    _RESULT_LEN
    + "    void *staged = max_result <= sizeof({0}) - CUDAQ_RPC_HEADER_SIZE\n"
    + "                       ? static_cast<void *>({1})\n"
    + "                       : response;\n"
)
_COPY_OUT = (
    "if (staged != response)\n{0}  cudaq_bench_copy_result(response, staged, box->result_len);\n{0}"
)
_HEADER = (
    "write_response_header(response, request, status, box->result_len); // at most max_result\n"
)
_MAX_RESULT = "  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;\n"
_MAX_FIRST = (
    "  // First, before anything else: computed later, it moved nvcc's schedule of the\n"
    "  // request's loads in the poll (bench/phases.py, single_thread_late_max).\n" + _MAX_RESULT
)
_SESSION_CHECK = "  if (session == nullptr)\n    return;\n"
# single_thread_staged_answer: the example's call and header through the by-name switch,
# each handler inlined once, the header written in the same call.
_STAGED_ANSWER = [
    ("    uint32_t result_len = 0;\n", ""),
    (
        _SHAPED_AND_HEADER,
        "    cudaq_bench_answer_staged(\n"
        "        cache.function_id, cache.shape == CUDAQ_HANDLER_SHAPE_THREAD, status,\n"
        "        request, response, stage, sizeof(stage), max_result);\n",
    ),
]
# single_thread_one: the example's test of its thread, replaced by one of its launch's
# size, which the compiler is then told (a launch-wide handler's stride becomes 1).
_ONE_THREAD_CHECK = "  if (threadIdx.x != 0 || blockIdx.x != 0)\n    return;\n"
_ONE_THREAD_ASSUMED = (
    "  if (cudaq_handler_size() != 1)\n"
    "    return;\n"
    "  __builtin_assume(blockDim.x == 1 && blockDim.y == 1 && blockDim.z == 1);\n"
    "  __builtin_assume(gridDim.x == 1 && gridDim.y == 1 && gridDim.z == 1);\n"
    "  __builtin_assume(threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0);\n"
    "  __builtin_assume(blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0);\n"
)


DERIVED: dict[str, tuple[str, str, str, str, list[tuple[str, str]], dict[str, str]]] = {
    "cluster_barrier_dispatcher": (
        "cluster_dispatcher.cu",
        "90",
        "cluster",
        "cluster_dispatcher",
        [
            (
                "    cluster_arrive(leader); // only the mailbox's writer releases\n"
                "    cluster_wait();         // acquire: the mailbox is visible\n",
                "    cluster.sync(); // every thread arrives with release\n",
            ),
            (
                "    __syncthreads();\n"
                "    cluster_arrive(block_leader);\n"
                "    cluster_wait(); // every block is done with the request\n",
                "    cluster.sync(); // every block is done with the request\n",
            ),
        ],
        {},
    ),
    "cluster_direct_dispatcher": (
        "cluster_dispatcher.cu",
        "90",
        "cluster",
        "cluster_dispatcher",
        [(_LAUNCH_CALL.format("box->entry->handler"), _DIRECT)],
        {},
    ),
    "cluster_launch_pointer_dispatcher": (
        "cluster_dispatcher.cu",
        "90",
        "cluster",
        "cluster_dispatcher",
        [(_LAUNCH_CALL.format("box->entry->handler"), _CALL.format("box->entry->handler"))],
        {},
    ),
    "cluster_push_dispatcher": (
        "cluster_dispatcher.cu",
        "90",
        "cluster",
        "cluster_dispatcher",
        [
            (_LEADER_END, _LEADER_END.replace("    }\n", _PUSH + "    }\n")),
            ("const int running = box->running;", "const int running = local_box.running;"),
            ("const void *request = box->request;", "const void *request = local_box.request;"),
            ("void *response = box->response;", "void *response = local_box.response;"),
            (
                _LAUNCH_CALL.format("box->entry->handler"),
                _LAUNCH_CALL.format("local_box.entry->handler"),
            ),
        ],
        {},
    ),
    "cluster_stageout_dispatcher": (
        "cluster_dispatcher.cu",
        "90",
        "cluster",
        "cluster_dispatcher",
        [
            (
                "  __shared__ __align__(16) uint8_t s_stage[256];\n",
                "  __shared__ __align__(16) uint8_t s_stage[256];\n"
                "  __shared__ __align__(16) uint8_t s_result[256];\n",
            ),
            (_RESULT_LEN, _STAGED.format("s_result", "cluster.map_shared_rank(s_result, 0)")),
            (
                _LAUNCH_CALL.format("box->entry->handler"),
                _LAUNCH_CALL.format("box->entry->handler").replace("response", "staged"),
            ),
            ("      " + _HEADER, "      " + _COPY_OUT.format("      ") + _HEADER),
        ],
        {},
    ),
    "coop_stageout_dispatcher": (
        "cooperative_grid_dispatcher.cu",
        "80",
        "cooperative_grid",
        "cooperative_grid_dispatcher",
        [
            (
                "__device__ Mailbox g_coop_mailbox;\n",
                "__device__ Mailbox g_coop_mailbox;\n__device__ uint64_t g_coop_result[32];\n",
            ),
            (_RESULT_LEN, _STAGED.format("g_coop_result", "g_coop_result")),
            (
                _LAUNCH_CALL.format("s_box.entry->handler"),
                _LAUNCH_CALL.format("s_box.entry->handler").replace("response", "staged"),
            ),
            ("        " + _HEADER, "        " + _COPY_OUT.format("        ") + _HEADER),
        ],
        {"g_coop_": "g_coopso_"},
    ),
    "coop_launch_pointer_dispatcher": (
        "cooperative_grid_dispatcher.cu",
        "80",
        "cooperative_grid",
        "cooperative_grid_dispatcher",
        [(_LAUNCH_CALL.format("s_box.entry->handler"), _CALL.format("s_box.entry->handler"))],
        {"g_coop_": "g_cooplp_"},
    ),
    "coop_stage_dispatcher": (
        "cooperative_grid_dispatcher.cu",
        "80",
        "cooperative_grid",
        "cooperative_grid_dispatcher",
        [
            (
                "  __shared__ Mailbox s_box; // this block's copy of the request's mailbox\n",
                "  __shared__ Mailbox s_box; // this block's copy of the request's mailbox\n"
                "  __shared__ __align__(16) uint8_t s_stage[256];\n",
            ),
            ("stats, nullptr, 0, &request,", "stats, s_stage, 256, &request,"),
            ("      box->entry = entry;\n", _COOP_COPY_OUT + "      box->entry = entry;\n"),
            (
                "__device__ Mailbox g_coop_mailbox;\n",
                "__device__ Mailbox g_coop_mailbox;\n__device__ uint64_t g_coop_request[32];\n",
            ),
        ],
        {"g_coop_": "g_coopst_"},
    ),
    "coop_direct_dispatcher": (
        "cooperative_grid_dispatcher.cu",
        "80",
        "cooperative_grid",
        "cooperative_grid_dispatcher",
        [(_LAUNCH_CALL.format("s_box.entry->handler"), _DIRECT)],
        {"g_coop_": "g_coopd_"},
    ),
    "single_thread_launch_pointer_dispatcher": _single_thread([(_SHAPED_CALL, _ONE_CALL)]),
    "single_thread_generic_dispatcher": _single_thread(
        [(_SHAPED_CALL, _SHAPED_CALL.replace("cudaq_call_handler(", "cudaq_bench_call_generic("))]
    ),
    "single_thread_answer_dispatcher": _single_thread(
        [("    uint32_t result_len = 0;\n", ""), (_SHAPED_AND_HEADER, _ANSWER)]
    ),
    "single_thread_closed_dispatcher": _single_thread(
        [
            (
                _SHAPED_CALL,
                "      status = cudaq_bench_call_closed(\n"
                "          cache.handler, cache.shape == CUDAQ_HANDLER_SHAPE_THREAD, request,\n"
                "          response, max_result, &result_len);\n",
            )
        ]
    ),
    "single_thread_byname_dispatcher": _single_thread(
        [
            (
                _SHAPED_CALL,
                "      status = cudaq_bench_call_byname(\n"
                "          cache.function_id, cache.shape == CUDAQ_HANDLER_SHAPE_THREAD, request,\n"
                "          response, max_result, &result_len);\n",
            )
        ]
    ),
    "single_thread_staged_dispatcher": _single_thread(
        [
            (
                _SHAPED_CALL,
                "      status = cudaq_bench_call_staged(\n"
                "          cache.function_id, cache.shape == CUDAQ_HANDLER_SHAPE_THREAD, request,\n"
                "          response, stage, sizeof(stage), max_result, &result_len);\n",
            )
        ]
    ),
    "single_thread_staged_answer_dispatcher": _single_thread(_STAGED_ANSWER),
    "single_thread_staged_hybrid_dispatcher": _single_thread(
        [
            ("    uint32_t result_len = 0;\n", ""),
            (
                _SHAPED_AND_HEADER,
                "    if (status != CUDAQ_RPC_STATUS_SUCCESS ||\n"
                "        cache.shape == CUDAQ_HANDLER_SHAPE_THREAD)\n"
                "      cudaq_bench_answer_staged(cache.function_id, true, status, request,\n"
                "                                response, stage, sizeof(stage), max_result);\n"
                "    else\n"
                "      cudaq_bench_answer_launch_byname(cache.function_id, request, response,\n"
                "                                       max_result);\n",
            ),
        ]
    ),
    "single_thread_one_dispatcher": _single_thread([(_ONE_THREAD_CHECK, _ONE_THREAD_ASSUMED)]),
    "single_thread_staged_one_dispatcher": _single_thread(
        [(_ONE_THREAD_CHECK, _ONE_THREAD_ASSUMED), *_STAGED_ANSWER]
    ),
    "single_thread_thread_only_dispatcher": _single_thread(
        [
            (
                _SHAPED_CALL,
                "      status = cache.shape == CUDAQ_HANDLER_SHAPE_THREAD\n"
                "                   ? " + _CALL.format("cache.handler") + "\n"
                "                   : CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;\n",
            )
        ]
    ),
    "single_thread_staged_thread_only_dispatcher": _single_thread(
        [
            ("    uint32_t result_len = 0;\n", ""),
            (
                _SHAPED_AND_HEADER,
                "    if (status == CUDAQ_RPC_STATUS_SUCCESS &&\n"
                "        cache.shape != CUDAQ_HANDLER_SHAPE_THREAD)\n"
                "      status = CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;\n"
                "    cudaq_bench_answer_staged(cache.function_id, true, status, request,\n"
                "                              response, stage, sizeof(stage), max_result);\n",
            ),
        ]
    ),
    "single_thread_rebuilt_dispatcher": _single_thread([]),
    "single_thread_late_max_dispatcher": _single_thread(
        [
            (_MAX_FIRST, ""),
            (_SESSION_CHECK, _SESSION_CHECK + _MAX_RESULT),
        ]
    ),
}
# A switch that takes no function's address (the DERIVED probes single_thread_byname and
# _staged*, and FLOOR_CU's ladder_switch_id_five and _all): the entry's function id compared
# with each handler's name's (cudaq_fnv1a_32, the wire's function id), the handler called by
# name, any other answered as an unknown function. (Comparing a handler's address, or calling
# through one, appends every address-taken function of the module to the kernel and puts a
# convergence barrier around each divergent branch.) The five handlers the single-thread
# example's switches inline: example_app's and FLOOR_CU's naive_echo_thread.
_BYNAME_SWITCH = r"""
extern "C" {
__device__ int echo_thread(const void *, uint32_t, void *, uint32_t, uint32_t *);
__device__ int rpc_increment_thread(const void *, uint32_t, void *, uint32_t, uint32_t *);
__device__ int naive_echo_thread(const void *, uint32_t, void *, uint32_t, uint32_t *);
__device__ int echo(const void *, uint32_t, void *, uint32_t, uint32_t *);
__device__ int rpc_increment(const void *, uint32_t, void *, uint32_t, uint32_t *);
}
static __device__ __forceinline__ int32_t
cudaq_bench_byname_switch(uint32_t function_id, bool thread, const void *args, uint32_t arg_len,
                          void *result, uint32_t max_result_len, uint32_t *result_len) {
#define CUDAQ_BENCH_BYNAME(name)                                                                 \
  {                                                                                              \
    constexpr uint32_t id = cudaq_fnv1a_32(#name);                                               \
    if (function_id == id)                                                                       \
      return cudaq_detail_call_direct(name, args, arg_len, result, max_result_len, result_len);  \
  }
  if (thread) {
    CUDAQ_BENCH_BYNAME(echo_thread)
    CUDAQ_BENCH_BYNAME(rpc_increment_thread)
    CUDAQ_BENCH_BYNAME(naive_echo_thread)
  } else {
    CUDAQ_BENCH_BYNAME(echo)
    CUDAQ_BENCH_BYNAME(rpc_increment)
  }
#undef CUDAQ_BENCH_BYNAME
  return CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;
}
"""
_DIRECT_ECHO = (
    """
// bench/phases.py: a closed handler switch (see DERIVED there: single_thread_closed): a
// direct call for each of these handlers and no pointer call for any other, so that the
// kernel holds no indirect call at all (an unknown handler is answered as an unknown
// function).
extern "C" {
extern __device__ const cudaq_device_handler_t cudaq_handler_echo_thread;
extern __device__ const cudaq_device_handler_t cudaq_handler_rpc_increment_thread;
extern __device__ const cudaq_device_handler_t cudaq_handler_naive_echo_thread;
extern __device__ const cudaq_device_handler_t cudaq_handler_echo;
extern __device__ const cudaq_device_handler_t cudaq_handler_rpc_increment;
}
static __device__ __forceinline__ int32_t
cudaq_bench_closed_switch(cudaq_device_handler_t handler, bool thread, const void *args,
                          uint32_t arg_len, void *result, uint32_t max_result_len,
                          uint32_t *result_len) {
  if (thread) {
    if (handler == cudaq_handler_echo_thread)
      return cudaq_detail_call_direct(cudaq_handler_echo_thread, args, arg_len, result,
                                      max_result_len, result_len);
    if (handler == cudaq_handler_rpc_increment_thread)
      return cudaq_detail_call_direct(cudaq_handler_rpc_increment_thread, args, arg_len, result,
                                      max_result_len, result_len);
    if (handler == cudaq_handler_naive_echo_thread)
      return cudaq_detail_call_direct(cudaq_handler_naive_echo_thread, args, arg_len, result,
                                      max_result_len, result_len);
  } else {
    if (handler == cudaq_handler_echo)
      return cudaq_detail_call_direct(cudaq_handler_echo, args, arg_len, result, max_result_len,
                                      result_len);
    if (handler == cudaq_handler_rpc_increment)
      return cudaq_detail_call_direct(cudaq_handler_rpc_increment, args, arg_len, result,
                                      max_result_len, result_len);
  }
  return CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;
}
// cudaq_call_handler (thread) or cudaq_call_launch_handler (launch-wide) through the
// closed switch.
static __device__ __forceinline__ int32_t
cudaq_bench_call_closed(cudaq_device_handler_t handler, bool thread, const void *request,
                        void *response, uint32_t max_result_len, uint32_t *result_len) {
  // the header's cudaq_call_handler, with this switch in both of its branches
  const auto choose = [&](const void *args, uint32_t arg_len, void *result, uint32_t max,
                          uint32_t *len) {
    return cudaq_bench_closed_switch(handler, thread, args, arg_len, result, max, len);
  };
  return cudaq_detail_call_tested(choose, choose, request, response, max_result_len, result_len);
}
"""
    + _BYNAME_SWITCH
    + """static __device__ __forceinline__ int32_t
cudaq_bench_call_byname(uint32_t function_id, bool thread, const void *request, void *response,
                        uint32_t max_result_len, uint32_t *result_len) {
  const auto choose = [&](const void *args, uint32_t arg_len, void *result, uint32_t max,
                          uint32_t *len) {
    return cudaq_bench_byname_switch(function_id, thread, args, arg_len, result, max, len);
  };
  return cudaq_detail_call_tested(choose, choose, request, response, max_result_len, result_len);
}
// A request a bridge left outside shared memory, copied into the kernel's stage: its header
// and arguments, in 8-byte words (the caller checked that they fit). Returns the stage.
static __device__ __forceinline__ const uint8_t *
cudaq_bench_stage_request(const uint8_t *req, uint32_t arg_len, uint8_t *stage) {
  const uint64_t *in = reinterpret_cast<const uint64_t *>(req);
  uint64_t *out = reinterpret_cast<uint64_t *>(__builtin_assume_aligned(stage, 8));
  for (uint32_t i = 0; i < (CUDAQ_RPC_HEADER_SIZE + arg_len + 7) / 8; ++i)
    out[i] = in[i];
  return stage;
}
// The same with every handler inlined once (see DERIVED there: single_thread_staged): a
// request a bridge left outside shared memory is copied into the kernel's stage first, and
// a response outside global memory (no bridge's) is answered as an unknown function.
static __device__ __forceinline__ int32_t
cudaq_bench_call_staged(uint32_t function_id, bool thread, const void *request, void *response,
                        uint8_t *stage, uint32_t stage_bytes, uint32_t max_result_len,
                        uint32_t *result_len) {
  const uint8_t *req = static_cast<const uint8_t *>(__builtin_assume_aligned(request, 8));
  uint8_t *resp = static_cast<uint8_t *>(__builtin_assume_aligned(response, 8));
  const uint32_t arg_len = static_cast<uint32_t>(cudaq_detail_request_header(req).w1);
  *result_len = 0;
  if (!__isGlobal(resp))
    return CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;
  if (!__isShared(req)) {
    if (arg_len > stage_bytes - CUDAQ_RPC_HEADER_SIZE)
      return CUDAQ_RPC_STATUS_ARGS_TOO_LONG;
    req = cudaq_bench_stage_request(req, arg_len, stage);
  }
  __builtin_assume(__isShared(req));
  __builtin_assume(__isGlobal(resp));
  uint32_t len = 0;
  const int32_t status =
      cudaq_bench_byname_switch(function_id, thread, req + CUDAQ_RPC_HEADER_SIZE, arg_len,
                                resp + CUDAQ_RPC_HEADER_SIZE, max_result_len, &len);
  *result_len = len < max_result_len ? len : max_result_len;
  return status;
}
// cudaq_bench_call_staged and the response header in one call, under the one assumption of
// address spaces (see DERIVED there: single_thread_staged_answer).
static __device__ __forceinline__ void
cudaq_bench_answer_staged(uint32_t function_id, bool thread, int32_t status, const void *request,
                          void *response, uint8_t *stage, uint32_t stage_bytes,
                          uint32_t max_result_len) {
  const uint8_t *req = static_cast<const uint8_t *>(__builtin_assume_aligned(request, 8));
  uint8_t *resp = static_cast<uint8_t *>(__builtin_assume_aligned(response, 8));
  if (!__isGlobal(resp))
    return; // no bridge's: nothing to answer into
  const uint32_t arg_len = static_cast<uint32_t>(cudaq_detail_request_header(req).w1);
  if (!__isShared(req)) {
    if (arg_len > stage_bytes - CUDAQ_RPC_HEADER_SIZE) {
      cudaq_detail_write_header(resp, req, CUDAQ_RPC_STATUS_ARGS_TOO_LONG, 0);
      return;
    }
    req = cudaq_bench_stage_request(req, arg_len, stage);
  }
  __builtin_assume(__isShared(req));
  __builtin_assume(__isGlobal(resp));
  uint32_t len = 0;
  if (status == CUDAQ_RPC_STATUS_SUCCESS)
    status = cudaq_bench_byname_switch(function_id, thread, req + CUDAQ_RPC_HEADER_SIZE, arg_len,
                                       resp + CUDAQ_RPC_HEADER_SIZE, max_result_len, &len);
  cudaq_detail_write_header(resp, req, status, len < max_result_len ? len : max_result_len);
}
// A launch-wide request answered by name with no assumption of address spaces (as
// cudaq_call_launch_handler calls it) and its header written in the same call (see DERIVED
// there: single_thread_staged_hybrid).
static __device__ __forceinline__ void
cudaq_bench_answer_launch_byname(uint32_t function_id, const void *request, void *response,
                                 uint32_t max_result_len) {
  const uint8_t *req = static_cast<const uint8_t *>(__builtin_assume_aligned(request, 8));
  uint8_t *resp = static_cast<uint8_t *>(__builtin_assume_aligned(response, 8));
  const cudaq_detail_request_words_t h = cudaq_detail_request_header(req);
  uint32_t len = 0;
  const int32_t status = cudaq_bench_byname_switch(
      function_id, false, req + CUDAQ_RPC_HEADER_SIZE, static_cast<uint32_t>(h.w1),
      resp + CUDAQ_RPC_HEADER_SIZE, max_result_len, &len);
  cudaq_detail_write_header_words(resp, h, status, len < max_result_len ? len : max_result_len);
}
// bench/phases.py: a thread-shaped call through the module's switch with no test of the
// request's address space (see DERIVED there: single_thread_generic).
static __device__ __forceinline__ int32_t
cudaq_bench_call_generic(cudaq_device_handler_t handler, const void *request, void *response,
                         uint32_t max_result_len, uint32_t *result_len) {
  const uint8_t *req = static_cast<const uint8_t *>(__builtin_assume_aligned(request, 8));
  uint8_t *resp = static_cast<uint8_t *>(__builtin_assume_aligned(response, 8));
  uint32_t len = 0;
  const int32_t status =
      cudaq_dev_call_handler(handler, req + CUDAQ_RPC_HEADER_SIZE, cudaq_request_arg_len(req),
                             resp + CUDAQ_RPC_HEADER_SIZE, max_result_len, &len);
  *result_len = len < max_result_len ? len : max_result_len;
  return status;
}
// bench/phases.py: a staged result's `len` bytes copied into the response slot, every load
// before the first store (see DERIVED there: *_stageout).
static __device__ __forceinline__ void cudaq_bench_copy_result(void *response, const void *staged,
                                                               uint32_t len) {
  constexpr uint32_t kMaxWords = (256 - CUDAQ_RPC_HEADER_SIZE) / 8;
  const uint64_t *from = static_cast<const uint64_t *>(staged) + CUDAQ_RPC_HEADER_SIZE / 8;
  uint64_t *to = static_cast<uint64_t *>(response) + CUDAQ_RPC_HEADER_SIZE / 8;
  const uint32_t words = (len + 7) / 8; // the slot's size is a multiple of 8
  uint64_t v[kMaxWords];
#pragma unroll
  for (uint32_t i = 0; i < kMaxWords; ++i)
    v[i] = i < words ? from[i] : 0;
#pragma unroll
  for (uint32_t i = 0; i < kMaxWords; ++i)
    if (i < words)
      to[i] = v[i];
}
extern "C" __device__ int echo(const void *, uint32_t, void *, uint32_t, uint32_t *);
// bench/phases.py: the launch-wide handler called by name (see DERIVED there).
static __device__ __forceinline__ int32_t
cudaq_bench_direct_echo(const void *request, void *response, uint32_t max_result,
                        uint32_t *result_len) {
  uint32_t len = 0;
  const int32_t status = echo(cudaq_request_args(request), cudaq_request_arg_len(request),
                              cudaq_response_result(response), max_result, &len);
  *result_len = len < max_result ? len : max_result;
  return status;
}
"""
)


def derived_source(kernel: str) -> str:
    """The CUDA source of DERIVED's ``kernel``, from its example's source."""
    source, _, _, example_kernel, replacements, renames = DERIVED[kernel]
    text = (EXAMPLE / source).read_text(encoding="utf-8")
    include = "#include <cudaq/realtime/unified_dispatch_device.cuh>\n"
    signature = f'extern "C" __global__ void {example_kernel}('
    needles = [include, signature, *(old for old, _ in replacements)]
    for needle in needles:
        if text.count(needle) != 1:
            lines = needle.strip().splitlines()
            shown = lines[0] + (" ..." if len(lines) > 1 else "")
            msg = f"bench/phases.py: {source} has not one `{shown}`: update DERIVED"
            raise SystemExit(msg)
    for old, new in replacements:
        text = text.replace(old, new)
    for old, new in renames.items():
        text = text.replace(old, new)
    text = text.replace(include, include + _DIRECT_ECHO)
    return text.replace(signature, f'extern "C" __global__ void {kernel}(')


#: Issue #12's naive handler (FLOOR_CU's, and the own module's: ``own_module_sources``).
NAIVE_HANDLER_CU = """\
// Issue #12's naive handler: a byte loop, the result written where the kernel
// points (the response slot, mapped host memory), and the same work inlined into
// a bare kernel: the ping-pong floor that stages the request in shared memory
// and runs that loop itself. Served by the single-thread dispatcher through the
// handler switch, the handler should cost what the inlined loop costs.
extern "C" __device__ int naive_echo_thread(const void *args, uint32_t arg_len, void *result,
                                            uint32_t max_result_len, uint32_t *result_len) {
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  const uint32_t n = arg_len < max_result_len ? arg_len : max_result_len;
  for (uint32_t i = 0; i < n; ++i)
    out[i] = in[i];
  *result_len = n;
  return 0;
}
CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(naive_echo_thread);
"""

FLOOR_CU = (
    r"""
#include <cudaq/realtime/unified_dispatch_device.cuh>
#ifndef CUDAQ_REALTIME_PHASES // --no-stamps: the floors' stamps are nothing too
#define cudaq_detail_phase_begin() ((void)0)
#endif
namespace {
__device__ __forceinline__ uint32_t ld_acquire_sys(const volatile uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_sys(volatile uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
}
// bench/dispatch.py's pingpong_floor, stamped at the same points as the run time.
extern "C" __global__ void pingpong_floor(const uint8_t *rx, uint8_t *tx,
                                          volatile uint32_t *rx_flags, volatile uint32_t *tx_flags,
                                          uint32_t num_slots, uint32_t slot_size,
                                          volatile int *shutdown) {
  uint32_t slot = 0, seq = 1, polls = 0;
  for (;;) {
    if (ld_acquire_sys(&rx_flags[slot]) == seq) {
      cudaq_detail_phase_begin();
      const size_t off = static_cast<size_t>(slot) * slot_size;
      const uint64_t *src = reinterpret_cast<const uint64_t *>(rx + off);
      uint64_t *dst = reinterpret_cast<uint64_t *>(tx + off);
      constexpr uint32_t kWords = 32;
      const uint32_t words = slot_size / 8 < kWords ? slot_size / 8 : kWords;
      uint64_t v[kWords];
#pragma unroll
      for (uint32_t i = 0; i < kWords; ++i)
        if (i < words)
          v[i] = src[i];
      uint32_t arg_len = static_cast<uint32_t>(v[1]);
      if (arg_len > words * 8 - 24)
        arg_len = 0;
      CUDAQ_REALTIME_PHASE(1);
      CUDAQ_REALTIME_PHASE(2);
      CUDAQ_REALTIME_PHASE(3);
      dst[0] = 0x43555153ull;
      dst[1] = (v[1] & 0xffffffff00000000ull) | arg_len;
      dst[2] = v[2];
      const uint32_t arg_words = (arg_len + 7) / 8;
#pragma unroll
      for (uint32_t i = 0; i < kWords - 3; ++i)
        if (i < arg_words)
          dst[3 + i] = v[3 + i];
      CUDAQ_REALTIME_PHASE(4);
      st_release_sys(&tx_flags[slot], seq);
      CUDAQ_REALTIME_PHASE_END();
      if (++slot == num_slots) {
        slot = 0;
        ++seq;
      }
    } else if ((++polls & 15u) == 0 && *shutdown != 0) {
      return;
    }
  }
}

"""
    + NAIVE_HANDLER_CU
    + r"""
// Its own loop, not one shared with pingpong_floor through a lambda: under LTO
// that split the stage copy below into two PCIe round trips (history run L).
extern "C" __global__ void naive_floor(const uint8_t *rx, uint8_t *tx,
                                       volatile uint32_t *rx_flags, volatile uint32_t *tx_flags,
                                       uint32_t num_slots, uint32_t slot_size,
                                       volatile int *shutdown) {
  __shared__ __align__(16) uint64_t stage[32];
  uint32_t slot = 0, seq = 1, polls = 0;
  for (;;) {
    if (ld_acquire_sys(&rx_flags[slot]) == seq) {
      cudaq_detail_phase_begin();
      const size_t off = static_cast<size_t>(slot) * slot_size;
      // The stage is written through a generic pointer, as the bridge's staging
      // copy writes it: ptxas must then issue every load before the first store
      // (one PCIe round trip); with the stage known to be shared memory it
      // interleaves them and the copy takes two round trips.
      const uint64_t *src = reinterpret_cast<const uint64_t *>(rx + off);
      uint64_t *to_stage;
      asm("cvta.shared.u64 %0, %1;" : "=l"(to_stage) : "l"(static_cast<uint64_t>(
                                                          __cvta_generic_to_shared(stage))));
      constexpr uint32_t kWords = 32;
      const uint32_t words = slot_size / 8 < kWords ? slot_size / 8 : kWords;
      uint64_t v[kWords];
#pragma unroll
      for (uint32_t i = 0; i < kWords; ++i)
        if (i < words)
          v[i] = src[i];
#pragma unroll
      for (uint32_t i = 0; i < kWords; ++i)
        if (i < words)
          to_stage[i] = v[i];
      CUDAQ_REALTIME_PHASE(1);
      CUDAQ_REALTIME_PHASE(2);
      const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
      uint32_t arg_len = static_cast<uint32_t>(v[1]);
      const uint32_t n = arg_len < max_result ? arg_len : max_result;
      const uint8_t *in = reinterpret_cast<const uint8_t *>(stage) + CUDAQ_RPC_HEADER_SIZE;
      uint8_t *out = tx + off + CUDAQ_RPC_HEADER_SIZE;
      for (uint32_t i = 0; i < n; ++i)
        out[i] = in[i];
      CUDAQ_REALTIME_PHASE(3);
      uint64_t *dst = reinterpret_cast<uint64_t *>(tx + off);
      dst[0] = 0x43555153ull;                        // magic, status 0
      dst[1] = (v[1] & 0xffffffff00000000ull) | n;   // result_len, request_id
      dst[2] = v[2];                                 // ptp timestamp
      CUDAQ_REALTIME_PHASE(4);
      st_release_sys(&tx_flags[slot], seq);
      CUDAQ_REALTIME_PHASE_END();
      if (++slot == num_slots) {
        slot = 0;
        ++seq;
      }
    } else if ((++polls & 15u) == 0 && *shutdown != 0) {
      return;
    }
  }
}

// The ping-pong floor with the request staged in shared memory and the echo
// copied out of the stage word by word: what staging costs a bare kernel (the
// run time stages every request that fits, so that handlers read their
// arguments from shared memory). Its own loop too, for naive_floor's reason.
extern "C" __global__ void stage_floor(const uint8_t *rx, uint8_t *tx,
                                       volatile uint32_t *rx_flags, volatile uint32_t *tx_flags,
                                       uint32_t num_slots, uint32_t slot_size,
                                       volatile int *shutdown) {
  __shared__ __align__(16) uint64_t stage[32];
  uint32_t slot = 0, seq = 1, polls = 0;
  for (;;) {
    if (ld_acquire_sys(&rx_flags[slot]) == seq) {
      cudaq_detail_phase_begin();
      const size_t off = static_cast<size_t>(slot) * slot_size;
      const uint64_t *src = reinterpret_cast<const uint64_t *>(rx + off);
      constexpr uint32_t kWords = 32;
      const uint32_t words = slot_size / 8 < kWords ? slot_size / 8 : kWords;
      uint64_t v[kWords];
#pragma unroll
      for (uint32_t i = 0; i < kWords; ++i)
        if (i < words)
          v[i] = src[i];
      const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
      uint32_t arg_len = static_cast<uint32_t>(v[1]);
      const uint32_t n = arg_len < max_result ? arg_len : max_result;
      const uint32_t need = (CUDAQ_RPC_HEADER_SIZE + n + 7) / 8;
#pragma unroll
      for (uint32_t i = 0; i < kWords; ++i)
        if (i < need)
          stage[i] = v[i];
      CUDAQ_REALTIME_PHASE(1);
      CUDAQ_REALTIME_PHASE(2);
      uint64_t *dst = reinterpret_cast<uint64_t *>(__builtin_assume_aligned(tx + off, 8));
      for (uint32_t i = 0; i < (n + 7) / 8; ++i)
        dst[3 + i] = stage[3 + i];
      CUDAQ_REALTIME_PHASE(3);
      dst[0] = 0x43555153ull;                              // magic, status 0
      dst[1] = (stage[1] & 0xffffffff00000000ull) | n;     // result_len, request_id
      dst[2] = stage[2];                                   // ptp timestamp
      CUDAQ_REALTIME_PHASE(4);
      st_release_sys(&tx_flags[slot], seq);
      CUDAQ_REALTIME_PHASE_END();
      if (++slot == num_slots) {
        slot = 0;
        ++seq;
      }
    } else if ((++polls & 15u) == 0 && *shutdown != 0) {
      return;
    }
  }
}

// The single-thread dispatcher's loop (example_app's, copied) for the probes
// below: `serve(request, response, stage, table, cache)` answers one polled
// request (status, handler, header), then it is published.
template <typename Serve>
__device__ __forceinline__ void probe_loop(void *transport_ctx, const cudaq_function_entry_t *table,
                                           uint32_t table_count, volatile int *shutdown_flag,
                                           Serve serve) {
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  table = cudaq_table_to_shared(table, table_count);
  void *session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  if (session == nullptr)
    return;
  __shared__ __align__(16) uint8_t stage[256];
  cudaq_lookup_cache_t cache = cudaq_lookup_cache_empty();
  void *request = nullptr;
  void *response = nullptr;
  while (cudaq_dev_rx_poll_into(session, &request, &response, stage, sizeof(stage), 1)) {
    serve(request, response, stage, table, cache);
    cudaq_dev_tx_publish(session, response);
  }
}

// Ablations of the single-thread dispatcher: which part of its handler phase
// costs what. Each serves thread-shaped requests.
//  - ablation_nostats: no per-request stats counter;
//  - ablation_direct: echo_thread called by name (no handler switch to run).
extern "C" __device__ int echo_thread(const void *, uint32_t, void *, uint32_t, uint32_t *);
extern "C" __device__ int rpc_increment_thread(const void *, uint32_t, void *, uint32_t,
                                               uint32_t *);
extern "C" __device__ int echo(const void *, uint32_t, void *, uint32_t, uint32_t *);
extern "C" __device__ const cudaq_device_handler_t cudaq_handler_echo_thread;
template <bool kStats, bool kSwitch>
__device__ __forceinline__ void ablation_loop(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  probe_loop(
      transport_ctx, table, table_count, shutdown_flag,
      [&](void *request, void *response, uint8_t *, const cudaq_function_entry_t *t,
          cudaq_lookup_cache_t &cache) {
        int32_t status = cudaq_validate_request_cached(request, slot_size, t, table_count, &cache);
        if (kStats)
          atomicAdd(stats, 1ull);
        uint32_t result_len = 0;
        if (status == CUDAQ_RPC_STATUS_SUCCESS) {
          if (kSwitch)
            status = cudaq_call_handler(cache.handler, request, response, max_result, &result_len);
          else
            status = echo_thread(cudaq_request_args(request), cudaq_request_arg_len(request),
                                 cudaq_response_result(response), max_result, &result_len);
        }
        write_response_header(response, request, status, result_len);
      });
}
extern "C" __global__ void ablation_nostats(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  ablation_loop<false, true>(transport_ctx, slot_size, table, table_count, shutdown_flag, stats);
}

// Candidate calls: the single-thread loop with the handler called
//  - variant_aligned: through the switch, the request and the response known
//    8-byte aligned (both are: the contract of rx_poll), their address spaces
//    tested at run time. Since session 8 this is what cudaq_call_handler does,
//    so it compiles as the shipped single_thread row does;
//  - variant_stage: the earlier releases' call: the kernel's own __shared__
//    stage passed as the arguments' pointer (request == stage), no address-space
//    test at run time. Measured 0.09-0.11 us slower than variant_aligned once
//    a handler's result length stayed in a register (session 7, three runs).
template <int kVariant>
__device__ __forceinline__ void variant_loop(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  probe_loop(
      transport_ctx, table, table_count, shutdown_flag,
      [&](void *request, void *response, uint8_t *stage, const cudaq_function_entry_t *t,
          cudaq_lookup_cache_t &cache) {
        int32_t status = cudaq_validate_request_cached(request, slot_size, t, table_count, &cache);
        atomicAdd(stats, 1ull);
        uint32_t result_len = 0;
        if (kVariant == 2 && request == stage) {
          uint8_t *out = static_cast<uint8_t *>(__builtin_assume_aligned(response, 8));
          __builtin_assume(__isGlobal(out));
          if (status == CUDAQ_RPC_STATUS_SUCCESS) {
            uint32_t len = 0;
            status = cudaq_dev_call_handler(cache.handler, stage + CUDAQ_RPC_HEADER_SIZE,
                                            cudaq_request_arg_len(stage),
                                            out + CUDAQ_RPC_HEADER_SIZE, max_result, &len);
            result_len = len < max_result ? len : max_result;
          }
          write_response_header(out, stage, status, result_len);
        } else {
          const void *req = __builtin_assume_aligned(request, 8);
          void *resp = __builtin_assume_aligned(response, 8);
          if (status == CUDAQ_RPC_STATUS_SUCCESS)
            status = cudaq_call_handler(cache.handler, req, resp, max_result, &result_len);
          write_response_header(resp, req, status, result_len);
        }
      });
}
// A ladder from stage_floor to the single-thread dispatcher, one feature a rung
// (exploration: what each costs). Each serves echo_thread's work inline.
//  - ladder_bridge: the host-ring hooks (poll_into, publish) and the header
//    helper; the echo copied by hand from the staged request;
//  - ladder_validate: + cudaq_validate_request_cached;
//  - ladder_stats: + the per-request stats counter (= the dispatcher, but for
//    the handler call);
//  - ladder_call: + example_app's echo_thread in place of the inline echo, called
//    by name (inlined) with both address spaces known and its result length
//    clamped, the header written in the same branch;
//  - ladder_switch: the same through the module's handler switch
//    (cudaq_dev_call_handler, the table's pointer compared with each export);
//  - ladder_switch_one: a switch of one: the table's pointer compared with
//    echo_thread's alone, any other called through the pointer;
//  - ladder_switch_one_closed: the same with no pointer call (any other answered
//    as an unknown function).
//  - ladder_switch_id: a switch of one that takes no function's address: the
//    entry's function id (the lookup cache's, a register) compared with
//    echo_thread's, echo_thread then called by name, any other answered as an
//    unknown function. (A kernel that compares a handler's address, or calls
//    through one, has every address-taken function of the module appended to its
//    code and a convergence barrier (BSSY/BSYNC) around each divergent branch:
//    58-99 in the switch's kernels, 1 in ladder_call; bench/sass.py.)
//  - ladder_switch_id_shapes: ladder_switch_id choosing by the entry's shape too,
//    example_app's launch-wide echo called by name for a launch-wide entry (the
//    single-thread example serves both shapes);
//  - ladder_switch_id_three: ladder_switch_id over three thread-shaped handlers
//    (echo_thread, rpc_increment_thread, naive_echo_thread), each by name;
//  - ladder_switch_id_generic: ladder_switch_id with a request whose address
//    spaces are not known served too, echo_thread called with generic pointers
//    (the other rungs answer it as too long; cudaq_call_handler serves it);
//  - ladder_switch_id_five: ladder_switch_id_shapes over the five handlers the
//    single-thread example's switches inline, each by name;
//  - ladder_switch_id_all: the same with a request of unknown address spaces
//    served too, the five inlined a second time for generic pointers (as
//    cudaq_call_handler's two branches do). Read in the SASS (bench/sass.py's
//    module, session 19): ladder_switch_id, _three and _generic keep the 1
//    convergence barrier (BSSY) of ladder_call, _shapes has 3, _five 5, _all 58
//    (the example 99, single_thread_byname 48, single_thread_staged 41): in the
//    ladder, inlining every handler twice fills a kernel with them as an address
//    taken does.
// ladder_switch_id_five and _all: the five handlers of the by-name switch (_BYNAME_SWITCH),
// chosen by the entry's shape and function id.
"""
    + _BYNAME_SWITCH
    + r"""
template <int kRung>
__device__ __forceinline__ void ladder_loop(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  probe_loop(
      transport_ctx, table, table_count, shutdown_flag,
      [&](void *request, void *response, uint8_t *, const cudaq_function_entry_t *t,
          cudaq_lookup_cache_t &cache) {
        int32_t status = CUDAQ_RPC_STATUS_SUCCESS;
        if (kRung >= 2)
          status = cudaq_validate_request_cached(request, slot_size, t, table_count, &cache);
        if (kRung >= 3)
          atomicAdd(stats, 1ull);
        uint32_t n = 0;
        if (__isShared(request) && __isGlobal(response)) {
          __builtin_assume(__isShared(request));
          __builtin_assume(__isGlobal(response));
          if (status == CUDAQ_RPC_STATUS_SUCCESS && kRung >= 4) {
            uint32_t len = 0;
            const void *args = cudaq_request_args(request);
            void *result = cudaq_response_result(response);
            const uint32_t arg_len = cudaq_request_arg_len(request);
            if (kRung == 4)
              status = cudaq_detail_call_direct(echo_thread, args, arg_len, result, max_result,
                                                &len);
            else if (kRung == 5)
              status = cudaq_dev_call_handler(cache.handler, args, arg_len, result, max_result,
                                              &len);
            else if (kRung == 8 || kRung == 11)
              status = cache.function_id == cudaq_fnv1a_32("echo_thread")
                           ? cudaq_detail_call_direct(echo_thread, args, arg_len, result,
                                                      max_result, &len)
                           : CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;
            else if (kRung == 9)
              status = cache.shape == CUDAQ_HANDLER_SHAPE_THREAD
                           ? (cache.function_id == cudaq_fnv1a_32("echo_thread")
                                  ? cudaq_detail_call_direct(echo_thread, args, arg_len, result,
                                                             max_result, &len)
                                  : CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION)
                           : (cache.function_id == cudaq_fnv1a_32("echo")
                                  ? cudaq_detail_call_direct(echo, args, arg_len, result,
                                                             max_result, &len)
                                  : CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION);
            else if (kRung == 12 || kRung == 13)
              status = cudaq_bench_byname_switch(cache.function_id,
                                                 cache.shape == CUDAQ_HANDLER_SHAPE_THREAD,
                                                 args, arg_len, result, max_result, &len);
            else if (kRung == 10)
              status = cache.function_id == cudaq_fnv1a_32("echo_thread")
                           ? cudaq_detail_call_direct(echo_thread, args, arg_len, result,
                                                      max_result, &len)
                       : cache.function_id == cudaq_fnv1a_32("rpc_increment_thread")
                           ? cudaq_detail_call_direct(rpc_increment_thread, args, arg_len, result,
                                                      max_result, &len)
                       : cache.function_id == cudaq_fnv1a_32("naive_echo_thread")
                           ? cudaq_detail_call_direct(naive_echo_thread, args, arg_len, result,
                                                      max_result, &len)
                           : CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;
            else if (cache.handler == cudaq_handler_echo_thread) // kRung 6 and 7
              status = cudaq_detail_call_direct(cudaq_handler_echo_thread, args, arg_len, result,
                                                max_result, &len);
            else if (kRung == 6)
              status = cudaq_detail_call_direct(cache.handler, args, arg_len, result, max_result,
                                                &len);
            else
              status = CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;
            n = len < max_result ? len : max_result;
          } else if (status == CUDAQ_RPC_STATUS_SUCCESS) {
            const uint32_t len = cudaq_request_arg_len(request);
            n = len < max_result ? len : max_result;
            const uint64_t *in = static_cast<const uint64_t *>(cudaq_request_args(request));
            uint64_t *out = static_cast<uint64_t *>(cudaq_response_result(response));
            for (uint32_t i = 0; i < (n + 7) / 8; ++i)
              out[i] = in[i];
          }
          CUDAQ_REALTIME_PHASE(3);
          cudaq_detail_write_header(response, request, status, n);
          CUDAQ_REALTIME_PHASE(4);
        } else if (kRung == 12) {
          uint32_t len = 0;
          if (status == CUDAQ_RPC_STATUS_SUCCESS)
            status = cudaq_bench_byname_switch(
                cache.function_id, cache.shape == CUDAQ_HANDLER_SHAPE_THREAD,
                cudaq_request_args(request), cudaq_request_arg_len(request),
                cudaq_response_result(response), max_result, &len);
          write_response_header(response, request, status, len < max_result ? len : max_result);
        } else if (kRung == 11) {
          uint32_t len = 0;
          if (status == CUDAQ_RPC_STATUS_SUCCESS)
            status = cache.function_id == cudaq_fnv1a_32("echo_thread")
                         ? cudaq_detail_call_direct(echo_thread, cudaq_request_args(request),
                                                    cudaq_request_arg_len(request),
                                                    cudaq_response_result(response), max_result,
                                                    &len)
                         : CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;
          write_response_header(response, request, status, len < max_result ? len : max_result);
        } else {
          write_response_header(response, request, CUDAQ_RPC_STATUS_ARGS_TOO_LONG, 0);
        }
      });
}
// One kernel a rung.
#define LADDER_RUNG(name, rung)                                                                  \
  extern "C" __global__ void name(CUDAQ_DISPATCH_KERNEL_PARAMS) {                                \
    ladder_loop<rung>(transport_ctx, slot_size, table, table_count, shutdown_flag, stats);       \
  }
LADDER_RUNG(ladder_bridge, 1)
LADDER_RUNG(ladder_validate, 2)
LADDER_RUNG(ladder_stats, 3)
LADDER_RUNG(ladder_call, 4)
LADDER_RUNG(ladder_switch, 5)
LADDER_RUNG(ladder_switch_one, 6)
LADDER_RUNG(ladder_switch_one_closed, 7)
LADDER_RUNG(ladder_switch_id, 8)
LADDER_RUNG(ladder_switch_id_shapes, 9)
LADDER_RUNG(ladder_switch_id_three, 10)
LADDER_RUNG(ladder_switch_id_generic, 11)
LADDER_RUNG(ladder_switch_id_five, 13)
LADDER_RUNG(ladder_switch_id_all, 12)
#undef LADDER_RUNG

extern "C" __global__ void variant_aligned(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  variant_loop<1>(transport_ctx, slot_size, table, table_count, shutdown_flag, stats);
}
extern "C" __global__ void variant_aligned_copy(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  variant_loop<1>(transport_ctx, slot_size, table, table_count, shutdown_flag, stats);
}
// variant_aligned's code, its own instantiation (kVariant 3 is 1): its own stage.
extern "C" __global__ void variant_aligned_solo(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  variant_loop<3>(transport_ctx, slot_size, table, table_count, shutdown_flag, stats);
}
extern "C" __global__ void variant_stage(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  variant_loop<2>(transport_ctx, slot_size, table, table_count, shutdown_flag, stats);
}
extern "C" __global__ void ablation_direct(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  ablation_loop<true, false>(transport_ctx, slot_size, table, table_count, shutdown_flag, stats);
}

// Probes (measurement only): what part of the handler phase is reading the
// arguments (a thread-shaped handler that writes its result without reading
// them), and what the lookup costs with the table in shared memory.
extern "C" __device__ int probe_noread_thread(const void *, uint32_t arg_len, void *result,
                                              uint32_t, uint32_t *result_len) {
  uint64_t *out = static_cast<uint64_t *>(result);
  for (uint32_t i = 0; i < arg_len / 8; ++i)
    out[i] = 0;
  *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(probe_noread_thread);

// echo_thread's work written as the ladder's inline echo is (ladder_loop): 8-byte words,
// the last one rounded up, no alignment test, no byte tail. ladder_stats (that echo inline)
// measured 0.10 us under the single-thread loop calling echo_thread (ablation_direct,
// variant_aligned: session 8, paired): the handler's own shape, or the call? (Slots are
// multiples of 8 bytes: the rounded-up word stays within the result area.)
extern "C" __device__ int lean_echo_thread(const void *args, uint32_t arg_len, void *result,
                                           uint32_t max_result_len, uint32_t *result_len) {
  const uint32_t n = arg_len < max_result_len ? arg_len : max_result_len;
  const uint64_t *in = static_cast<const uint64_t *>(__builtin_assume_aligned(args, 8));
  uint64_t *out = static_cast<uint64_t *>(__builtin_assume_aligned(result, 8));
  for (uint32_t i = 0; i < (n + 7) / 8; ++i)
    out[i] = in[i];
  *result_len = n;
  return 0;
}
CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(lean_echo_thread);

// Two forms of example_app's echo_thread (its serve_bytes with rank 0, size 1) that keep
// the word loop a loop: in session 11 the launch-wide echo (the same body with the
// stride read from blockDim/gridDim, unknown to the compiler) measured 0.06 us faster
// than echo_thread in the single-thread kernel. loop_echo_thread: the word loop with
// #pragma unroll 1; stride_echo_thread: the stride an opaque 1.
extern "C" __device__ int loop_echo_thread(const void *args, uint32_t arg_len, void *result,
                                           uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len > max_result_len) {
    *result_len = 0;
    return 1;
  }
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  uint32_t done = 0;
  if (((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 7u) == 0) {
    const uint32_t words = arg_len / 8;
#pragma unroll 1
    for (uint32_t i = 0; i < words; ++i)
      reinterpret_cast<uint64_t *>(out)[i] = reinterpret_cast<const uint64_t *>(in)[i];
    done = words * 8;
  }
#pragma unroll 1
  for (uint32_t i = done; i < arg_len; ++i)
    out[i] = in[i];
  *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(loop_echo_thread);

extern "C" __device__ int stride_echo_thread(const void *args, uint32_t arg_len, void *result,
                                             uint32_t max_result_len, uint32_t *result_len) {
  uint32_t size;
  asm("mov.u32 %0, 1;" : "=r"(size)); // 1, unknown to the compiler
  if (arg_len > max_result_len) {
    *result_len = 0;
    return 1;
  }
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  uint32_t done = 0;
  if (((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 7u) == 0) {
    const uint32_t words = arg_len / 8;
    for (uint32_t i = 0; i < words; i += size)
      reinterpret_cast<uint64_t *>(out)[i] = reinterpret_cast<const uint64_t *>(in)[i];
    done = words * 8;
  }
  for (uint32_t i = done; i < arg_len; i += size)
    out[i] = in[i];
  *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(stride_echo_thread);

extern "C" __global__ void probe_smem_table_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  __shared__ cudaq_function_entry_t s_table[16];
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  const uint32_t n = table_count < 16 ? table_count : 16;
  for (uint32_t i = 0; i < n; ++i)
    s_table[i] = table[i];
  void *session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  if (session == nullptr)
    return;
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  void *request = nullptr;
  void *response = nullptr;
  while (cudaq_dev_rx_poll(session, &request, &response)) {
    const cudaq_detail_request_words_t h = cudaq_detail_request_header(request);
    int32_t status = CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;
    const cudaq_function_entry_t *entry = nullptr;
    for (uint32_t i = 0; i < n; ++i)
      if (s_table[i].function_id == static_cast<uint32_t>(h.w0 >> 32)) {
        entry = &s_table[i];
        status = 0;
        break;
      }
    CUDAQ_REALTIME_PHASE(2);
    atomicAdd(stats, 1ull);
    uint32_t result_len = 0;
    if (status == 0)
      status = entry->handler(cudaq_request_args(request), static_cast<uint32_t>(h.w1),
                              cudaq_response_result(response), max_result, &result_len);
    write_response_header(response, request, status, result_len);
    cudaq_dev_tx_publish(session, response);
  }
}

// The built-in kernel's leader loop (cudaq_serve_until_launch_wide, its stage in
// shared memory) on a one-thread launch, a launch-wide request served by that
// thread: the built-in kernel's thread-shaped path without its block. Rungs from
// it to the built-in kernel on one thread (builtin_1), one feature a rung (which
// part of the built-in kernel's code, around the same leader loop, costs its
// thread-shaped path):
//  - probe_serve_until_readback: the session read back from a __shared__
//    variable after a barrier, as the built-in kernel does (a generic pointer
//    to the compiler; without the barrier the compiler forwards the store and
//    the poll reads the session with LDS, as session 17 run D measured it);
//  - probe_builtin_loop: + the built-in kernel's outer loop and shared mailbox
//    (a launch-wide request handed over and served by the one thread), no
//    barriers: the built-in kernel's body (skbuild_cudaq/device/
//    unified_dispatch_kernel.cu) for one thread.
template <bool kReadBack>
__device__ __forceinline__ void serve_until_loop(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  __shared__ __align__(16) uint8_t stage[256];
  __shared__ void *s_session;
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  table = cudaq_table_to_shared(table, table_count);
  void *session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  if (kReadBack) {
    s_session = session;
    __syncthreads(); // as in the built-in kernel: the compiler cannot forward the store
    session = s_session;
  }
  if (session == nullptr)
    return;
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  void *request = nullptr;
  void *response = nullptr;
  const cudaq_function_entry_t *entry = nullptr;
  while (cudaq_serve_until_launch_wide(session, slot_size, table, table_count, stats, stage,
                                       sizeof(stage), &request, &response, &entry)) {
    uint32_t result_len = 0;
    const int32_t status =
        cudaq_call_launch_handler(entry->handler, request, response, max_result, &result_len);
    write_response_header(response, request, status, result_len);
    cudaq_dev_tx_publish(session, response);
  }
}
extern "C" __global__ void probe_serve_until(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  serve_until_loop<false>(transport_ctx, slot_size, table, table_count, shutdown_flag, stats);
}
extern "C" __global__ void probe_serve_until_readback(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  serve_until_loop<true>(transport_ctx, slot_size, table, table_count, shutdown_flag, stats);
}
extern "C" __global__ void probe_builtin_loop(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  __shared__ void *s_session;
  __shared__ void *s_request;
  __shared__ void *s_response;
  __shared__ const cudaq_function_entry_t *s_entry;
  __shared__ int s_running;
  __shared__ uint32_t s_result_len;
  __shared__ __align__(16) uint8_t s_stage[256];
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  table = cudaq_table_to_shared(table, table_count);
  s_session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  __syncthreads(); // as in the built-in kernel: the compiler cannot forward the store
  void *session = s_session;
  if (session == nullptr)
    return;
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  for (;;) {
    void *request = nullptr;
    void *response = nullptr;
    const cudaq_function_entry_t *entry = nullptr;
    s_running = cudaq_serve_until_launch_wide(session, slot_size, table, table_count, stats,
                                              s_stage, sizeof(s_stage), &request, &response,
                                              &entry);
    s_entry = entry;
    s_request = request;
    s_response = response;
    s_result_len = 0;
    if (!s_running)
      break;
    uint32_t result_len = 0;
    const int32_t status = cudaq_call_launch_handler(s_entry->handler, s_request, s_response,
                                                     max_result, &result_len);
    if (result_len != 0)
      s_result_len = result_len;
    write_response_header(s_response, s_request, status, s_result_len);
    cudaq_dev_tx_publish(session, s_response);
  }
}
"""
)


#: The run time's device sources, in every module of this benchmark.
RUNTIME_SOURCES = (
    (RUNTIME / "unified_dispatch_kernel.cu", "80"),
    (RUNTIME / "host_ring_bridge.cu", "80"),
)
#: example_app's handler sources, in every module of this benchmark.
EXAMPLE_HANDLERS = (EXAMPLE / "handlers.cu", EXAMPLE / "block_handlers.cu")


def write_derived(work: Path, kernel: str) -> Path:
    """DERIVED's ``kernel`` written to ``work`` (named without ``_dispatcher``)."""
    derived = work / f"{kernel.removesuffix('_dispatcher')}.cu"
    derived.write_text(derived_source(kernel), encoding="utf-8")
    return derived


def write_floor_and_switch(work: Path, generator: str) -> tuple[Path, Path]:
    """FLOOR_CU and the handler switch over example_app's and its exports, written to ``work``.

    The switch is what skbuild-cudaq's build adds to a module (one generator,
    ``skbuild_cudaq.build._handler_switch``); without it the module links the run
    time's default form of ``cudaq_dev_call_handler``, the call through the pointer.
    """
    from skbuild_cudaq.build._handler_switch import write_switch

    floor = work / "floor_phases.cu"
    floor.write_text(FLOOR_CU)
    switch = work / "handler_switch.cu"
    write_switch(switch, generator, [*EXAMPLE_HANDLERS, floor])
    return floor, switch


def compile_lto(
    nvcc: str, work: Path, sources: list[tuple[Path, str]], *, stamps: bool
) -> list[tuple[str, bytes]]:
    """The LTO-IR (a fatbin) of each (source, architecture), in order, for nvJitLink."""
    out = []
    for src, arch in sources:
        fatbin = work / (src.stem + ".fatbin")
        cmd = [nvcc, "-fatbin", "-rdc=true", "-std=c++17"]
        cmd += ["-DCUDAQ_REALTIME_PHASES"] if stamps else []
        cmd += [f"-gencode=arch=compute_{arch},code=lto_{arch}", f"-I{INCLUDE}"]
        subprocess.run([*cmd, "-o", str(fatbin), str(src)], check=True)
        out.append((src.name, fatbin.read_bytes()))
    return out


def compile_all(
    nvcc: str, work: Path, *, stamps: bool = True
) -> tuple[list[tuple[str, bytes]], tuple[str, bytes]]:
    """The LTO-IR of every source, and of the handler switch over their exports
    (``write_floor_and_switch``)."""
    floor, switch = write_floor_and_switch(work, "bench/phases.py")
    sources = [
        *RUNTIME_SOURCES,
        *((h, "80") for h in EXAMPLE_HANDLERS),
        (EXAMPLE / "single_thread_dispatcher.cu", "80"),
        (EXAMPLE / "cooperative_grid_dispatcher.cu", "80"),
        (EXAMPLE / "warp_parallel_dispatcher.cu", "80"),
        (EXAMPLE / "cluster_dispatcher.cu", "90"),
        (floor, "80"),
        *((HANDOFF_DIR / source, arch) for source, arch, _ in HANDOFF.values()),
    ]
    for kernel, (_, arch, *_rest) in DERIVED.items():
        sources.append((write_derived(work, kernel), arch))
    sources.append((switch, "80"))
    out = compile_lto(nvcc, work, sources, stamps=stamps)
    return out[:-1], out[-1]


#: The own module's pairs (label, floor of the probe module, dispatch kind, handler): the
#: single-thread example in a module like a user's (``own_module_sources``).
OWN_MODULE_PAIRS = (
    (
        "single_thread:naive_echo_thread@own_module",
        "naive_floor",
        "single_thread",
        "naive_echo_thread",
    ),
    ("single_thread:echo_thread@own_module", "pingpong_floor", "single_thread", "echo_thread"),
    ("single_thread:echo@own_module", "pingpong_floor", "single_thread", "echo"),
    *(
        (f"{k}:{h}@own_module", floor, f"{k}_dispatcher", h)
        for k in THREAD_ONLY_PROBES
        for h, floor in (("naive_echo_thread", "naive_floor"), ("echo_thread", "pingpong_floor"))
    ),
)


def own_module_sources(work: Path) -> list[tuple[Path, str]]:
    """A module like a user's: the run time, example_app's handlers and single-thread kernel,
    and issue #12's naive handler alone (``NAIVE_HANDLER_CU``), with the handler switch over
    just those handlers, as a package of example_app's sources plus that handler would build;
    and the single-thread probes for thread-shaped handlers alone (``THREAD_ONLY_PROBES``).

    The probe module's switch also holds FLOOR_CU's other thread-shaped probes
    (``probe_noread_thread``, ``lean_echo_thread``, ...), which its single-thread kernel then
    inlines too: no user's module has them. The sources go to ``work``, a directory of
    their own (``compile_lto`` names its outputs by the sources' names).
    """
    from skbuild_cudaq.build._handler_switch import write_switch

    work.mkdir(parents=True, exist_ok=True)
    naive = work / "naive_handler.cu"
    naive.write_text(
        "#include <cudaq/realtime/unified_dispatch_device.cuh>\n" + NAIVE_HANDLER_CU,
        encoding="utf-8",
    )
    handlers = [*EXAMPLE_HANDLERS, naive]
    switch = work / "handler_switch.cu"
    write_switch(switch, "bench/phases.py (own module)", handlers)
    return [
        *RUNTIME_SOURCES,
        *((h, "80") for h in handlers),
        (EXAMPLE / "single_thread_dispatcher.cu", "80"),
        # the example for thread-shaped handlers alone
        *((write_derived(work, f"{k}_dispatcher"), "80") for k in THREAD_ONLY_PROBES),
        (switch, "80"),
    ]


def naive_goals(pair: dict[str, Any], name: str, what: str, what_gap: str) -> dict[str, Any]:
    """Issue #12's naive-handler goals (back to back, random arrival) from a paired row."""
    goals = {}
    for suffix, key, text in (
        ("", "over_floor_us", what),
        ("_random_arrival", "over_floor_random_arrival_us", what_gap),
    ):
        value = float(pair.get(key, float("nan")))
        goals[f"{name}{suffix}_us"] = {
            "value": value,
            "goal": "<= 0.1",
            "met": value <= 0.1,
            "what": text,
        }
    return goals


def nvjitlink_link(inputs: list[tuple[str, bytes]], arch: str) -> bytes:
    """The run time's own nvJitLink call (errors carry nvJitLink's log)."""
    from skbuild_cudaq.realtime._nvjitlink import link_blobs

    return link_blobs(inputs, [f"-arch=sm_{arch}", "-lto"], sources="bench/phases.py")


class PhaseLog:
    """The measurement build's ``cudaq_phase_log`` of one loaded library (``stamps=False``:
    a build without stamps, nothing to read)."""

    def __init__(self, lib_handle: Any, *, stamps: bool = True) -> None:
        self.stamps = stamps
        if not stamps:
            return
        drv = bench._drv()
        self.log, size = bench.ok(
            drv.cuLibraryGetGlobal(lib_handle, b"cudaq_phase_log"), "cuLibraryGetGlobal(log)"
        )
        assert int(size) == RECORDS * 64, size
        self.next, _ = bench.ok(
            drv.cuLibraryGetGlobal(lib_handle, b"cudaq_phase_next"), "cuLibraryGetGlobal(next)"
        )

    def reset(self) -> None:
        if not self.stamps:
            return
        drv = bench._drv()
        bench.ok(drv.cuMemsetD32(self.next, 0, 1), "cuMemsetD32(next)")

    def read(self) -> np.ndarray:
        drv = bench._drv()
        count = ctypes.c_uint32(0)
        bench.ok(drv.cuMemcpyDtoH(ctypes.addressof(count), self.next, 4), "cuMemcpyDtoH(next)")
        n = min(int(count.value), RECORDS)
        out = np.zeros((n, 8), dtype=np.uint64)
        if n:
            bench.ok(drv.cuMemcpyDtoH(out.ctypes.data, self.log, n * 64), "cuMemcpyDtoH(log)")
        return out


def breakdown(records: np.ndarray, skip: int) -> dict[str, Any]:
    """Median phase durations (ns) from clock64 stamps, scaled by the globaltimer."""
    r = records[skip:].astype(np.int64)
    cycles = r[:, 5] - r[:, 0]
    ns = r[:, 7] - r[:, 6]
    ns_per_cycle = float(ns.sum()) / float(cycles.sum()) if cycles.sum() > 0 else float("nan")
    out: dict[str, Any] = {"n": int(r.shape[0]), "ns_per_cycle": ns_per_cycle}
    previous = r[:, 0]
    for i, name in enumerate(PHASES, start=1):
        out[name] = float(np.median(r[:, i] - previous)) * ns_per_cycle / 1000.0  # us
        previous = r[:, i]
    out["device_total"] = float(np.median(cycles)) * ns_per_cycle / 1000.0
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument(
        "--no-stamps",
        action="store_true",
        help="build without the stamps (production code): round trips only, no phases",
    )
    parser.add_argument(
        "--pair-rounds",
        type=int,
        default=5,
        help="rounds of the naive handler's goal, each right after a round of naive_floor",
    )
    opts = parser.parse_args(argv)
    if opts.pair_rounds < 1:
        parser.error("--pair-rounds must be at least 1")
    stamps = not opts.no_stamps

    from example_app import launchers
    from skbuild_cudaq.realtime import (
        Dispatcher,
        DispatcherConfig,
        HostRingBridge,
        LaunchConfig,
        Library,
    )

    drv, dev, device_name, arch, nvcc = bench.gpu_and_nvcc(0)
    results: dict[str, Any] = {
        "benchmark": "phases",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name,
        "compute_capability": f"{arch[:-1]}.{arch[-1]}",
        "versions": bench.versions(),
        "config": {
            "num_slots": bench.NUM_SLOTS,
            "slot_size": bench.SLOT_SIZE,
            "arg_len": bench.ARG_LEN,
            "samples": opts.samples,
            "warmup": opts.warmup,
            "phases": ["seen", *PHASES],
            "clock": "clock64 deltas scaled by %globaltimer over the same requests",
            "stamps": stamps,
            "gap_ns": GAP_NS,
            "pair_rounds": opts.pair_rounds,
        },
        "configurations": {},
        "paired": {},
        "errors": {},
    }
    table: dict[str, Any] = results["configurations"]

    with tempfile.TemporaryDirectory(prefix="cudaq-phases-") as tmp:
        work = Path(tmp)
        so, _ = bench.build_tools(work, arch)
        inputs, switch = compile_all(nvcc, work, stamps=stamps)
        cubin = nvjitlink_link([*inputs, switch], arch)
        (work / "phases.cubin").write_bytes(cubin)
        gen = bench.LoadGen(so)
        bridge = HostRingBridge(bench.NUM_SLOTS, bench.SLOT_SIZE).open()
        ring = bridge.host_address

        def serve(label: str, handler: str | None, log: PhaseLog) -> None:
            fid = bench.fnv1a(handler or "echo")
            gen.rewind()
            gen.latency(ring, fid, opts.warmup)
            rt = bench.percentiles(gen.latency(ring, fid, opts.samples))
            entry = breakdown(log.read(), opts.warmup) if stamps else {}
            entry["round_trip_p50"] = rt["p50"]
            entry["round_trip_p99"] = rt["p99"]
            # The same with random arrival (a think time before each request): no
            # locking into one phase of the poll loop.
            gap = bench.percentiles(gen.latency(ring, fid, opts.samples, gap_ns=GAP_NS))
            entry["round_trip_gap_p50"] = gap["p50"]
            entry["round_trip_gap_p99"] = gap["p99"]
            entry["handler"] = handler
            table[label] = entry
            line = f"{label:>32}: rt {rt['p50']:.2f} (random arrival {gap['p50']:.2f}) us"
            if stamps:
                entry["outside_device"] = rt["p50"] - entry["device_total"]
                line += (
                    f" = device {entry['device_total']:.2f} "
                    + " ".join(f"{p} {entry[p]:.2f}" for p in PHASES)
                    + f" + outside {entry['outside_device']:.2f}"
                )
            print(line, file=sys.stderr)

        # The floors, stamped, from their own load of the same cubin: the ping-pong
        # echo, and the naive handler's byte loop inlined.
        floors = bench.Floors(work / "phases.cubin", bridge)
        floor_log = PhaseLog(floors.lib, stamps=stamps)
        for name in (
            "pingpong_floor",
            "naive_floor",
            "stage_floor",
        ):
            floor_log.reset()
            with floors.running(name, 1):
                serve(name, None, floor_log)
        floors.close()

        def measure(
            library: Library,
            plan: list[tuple[str, str, str]],
            pairs: tuple[tuple[str, str, str, str], ...] = (),
        ) -> None:
            """Serve each (label, dispatch kind, handler) of ``plan`` with ``library``'s kernels,
            then each (label, floor, dispatch kind, handler) of ``pairs`` in rounds, each round
            right after a round of that floor (a bare kernel of the cubin): round trips drift
            over a run by more than a goal's margin (bench/dispatch.py's module doc)."""
            log = PhaseLog(library.load(), stamps=stamps)
            # Launchers for this library's kernels (example_app's, looked up here).
            launchers.get_device_kernel = lambda module, kernel, **_: library.get_kernel(kernel)  # type: ignore[assignment]

            def builtin_on(name: str, threads: int) -> Any:
                return launchers.KernelLauncher(
                    name,
                    library.get_kernel("cudaq_realtime_unified_dispatch"),
                    lambda kernel, args: LaunchConfig(grid=(1, 1, 1), block=(threads, 1, 1)),
                )

            builtin = builtin_on("builtin", 128)
            # the built-in kernel on one thread: what its block's idle threads (waiting at
            # the barrier while the leader serves thread-shaped requests) cost that leader
            builtin_one = builtin_on("builtin_1", 1)
            kinds = {
                "single_thread": lambda: launchers.single_thread(None),  # type: ignore[arg-type]
                "builtin": lambda: builtin,
                "builtin_1": lambda: builtin_one,
                "cooperative_grid": lambda: launchers.cooperative_grid(None),  # type: ignore[arg-type]
                "cluster": lambda: launchers.cluster(None),  # type: ignore[arg-type]
                # the cooperative kernel on 8 blocks instead of one per SM: what the
                # hand-off's cost owes to the grid's size
                "cooperative_grid_8": lambda: launchers.cooperative_grid(None, blocks=8),  # type: ignore[arg-type]
                "warp_parallel": lambda: launchers.warp_parallel(None),  # type: ignore[arg-type]
            }
            one_thread = [
                "probe_smem_table_dispatcher",
                "probe_serve_until",
                "probe_serve_until_readback",
                "probe_builtin_loop",
                *ABLATIONS,
                *VARIANTS,
                *LADDER,
                *PLACEMENT,
            ]
            for name in one_thread:
                kinds[name] = lambda name=name: launchers.KernelLauncher(  # type: ignore[misc]
                    name,
                    library.get_kernel(name),
                    lambda kernel, args: LaunchConfig(grid=(1, 1, 1), block=(1, 1, 1)),
                )
            shapes = {k: v[2] for k, v in {**HANDOFF, **DERIVED}.items()}
            for name, shape in shapes.items():
                kinds[name] = lambda name=name, shape=shape: launchers.KernelLauncher(  # type: ignore[misc]
                    name, library.get_kernel(name), kinds[shape]().configure
                )
            config = DispatcherConfig(num_slots=bench.NUM_SLOTS, slot_size=bench.SLOT_SIZE)
            for label, kind, handler in plan:
                try:
                    with Dispatcher(config, bridge=bridge) as d:
                        d.function_table.add_device(handler, library.get_handler(handler))
                        d.set_unified_launch(kinds[kind]())
                        log.reset()
                        d.start()
                        serve(label, handler, log)
                except Exception as exc:  # keep measuring the others; report it
                    results["errors"][label] = f"{type(exc).__name__}: {exc}"
                    print(f"{label}: {exc}", file=sys.stderr)
            per_round = max(1, opts.samples // opts.pair_rounds)

            def p50s(fid: int) -> tuple[float, float]:
                gen.rewind()
                gen.latency(ring, fid, max(1, opts.warmup // opts.pair_rounds))
                b2b = float(np.median(gen.latency(ring, fid, per_round)))
                return b2b, float(np.median(gen.latency(ring, fid, per_round, gap_ns=GAP_NS)))

            for label, floor_name, kind, handler in pairs:
                fid = bench.fnv1a(handler)
                rows: list[dict[str, float]] = []
                try:
                    bare = bench.Floors(work / "phases.cubin", bridge)
                    try:
                        for _ in range(opts.pair_rounds):
                            with bare.running(floor_name, 1):
                                f_b2b, f_gap = p50s(fid)
                            with Dispatcher(config, bridge=bridge) as d:
                                d.function_table.add_device(handler, library.get_handler(handler))
                                d.set_unified_launch(kinds[kind]())
                                d.start()
                                m_b2b, m_gap = p50s(fid)
                            rows.append(
                                {
                                    "floor_p50": f_b2b,
                                    "p50": m_b2b,
                                    "floor_gap_p50": f_gap,
                                    "gap_p50": m_gap,
                                }
                            )
                    finally:
                        bare.close()
                except Exception as exc:  # keep measuring the others; report it
                    results["errors"][label] = f"{type(exc).__name__}: {exc}"
                    print(f"{label}: {exc}", file=sys.stderr)
                    continue
                over = [r["p50"] - r["floor_p50"] for r in rows]
                over_gap = [r["gap_p50"] - r["floor_gap_p50"] for r in rows]
                results["paired"][label] = {
                    "floor": floor_name,
                    "over_floor_us": float(np.median(over)),
                    "over_floor_random_arrival_us": float(np.median(over_gap)),
                    "rounds": rows,
                }
                print(
                    f"{label:>32}: paired with {floor_name}: {np.median(over):+.3f} us"
                    f" (random arrival {np.median(over_gap):+.3f}) over {len(rows)} rounds",
                    file=sys.stderr,
                )
            library.close()

        shapes = ("single_thread", "builtin", "cooperative_grid", "cluster", "warp_parallel")
        plan = [(k, k, "echo") for k in shapes] + [
            (f"{k}:thread", k, "echo_thread") for k in shapes
        ]
        plan += [
            ("single_thread:naive_echo_thread", "single_thread", "naive_echo_thread"),
            ("single_thread:probe_noread_thread", "single_thread", "probe_noread_thread"),
            ("single_thread:lean_echo_thread", "single_thread", "lean_echo_thread"),
            ("coop_stage:thread", "coop_stage_dispatcher", "echo_thread"),
            (
                "probe_smem_table:probe_noread_thread",
                "probe_smem_table_dispatcher",
                "probe_noread_thread",
            ),
        ]
        plan += [(f"{a}:thread", a, "echo_thread") for a in ABLATIONS]
        plan += [(f"{v}:thread", v, "echo_thread") for v in VARIANTS]
        plan += [(f"{r}:thread", r, "echo_thread") for r in LADDER]
        plan += [(f"{v}:naive_echo_thread", v, "naive_echo_thread") for v in VARIANTS]
        multi = [k for k, v in DERIVED.items() if v[2] != "single_thread"]
        plan += [(h.removesuffix("_dispatcher"), h, "echo") for h in (*HANDOFF, *multi)]
        plan += [("cooperative_grid@8_blocks", "cooperative_grid_8", "echo")]
        # issue #12's naive-handler goal, paired round by round with its floor
        naive_label = "single_thread:naive_echo_thread"
        # The single-thread path rung by rung, each paired with the ping-pong floor (the
        # plan's one-off rows drift apart by more than a rung costs); "<label>" below is the
        # plan's row of the same kernel and handler.
        pairs = ((naive_label, "naive_floor", "single_thread", "naive_echo_thread"),)
        # The single-thread probes with the naive handler, each paired with its floor too.
        pairs += tuple(
            (f"{k}:naive_echo_thread", "naive_floor", f"{k}_dispatcher", "naive_echo_thread")
            for k in ("single_thread_generic", *CHOICE_PROBES, *THREAD_ONLY_PROBES)
        )
        # The ladder's by-name switches with the naive handler: what the naive goal's
        # dispatcher could reach with no other code around its call.
        pairs += tuple(
            (f"{k}:naive_echo_thread", "naive_floor", k, "naive_echo_thread")
            for k in ("ladder_switch_id_three", "ladder_switch_id_five")
        )
        lean = "lean_echo_thread"
        pairs += ((f"single_thread:{lean}", "pingpong_floor", "single_thread", lean),)
        pairs += tuple(
            (f"single_thread:{h}", "pingpong_floor", "single_thread", h)
            for h in ("loop_echo_thread", "stride_echo_thread")
        )
        pairs += tuple(
            (f"{k}:echo_thread", "pingpong_floor", k, "echo_thread")
            for k in (
                *LADDER,
                "ablation_nostats",
                "ablation_direct",
                *VARIANTS,
                "single_thread",
                *PLACEMENT,
                *(k for k, v in DERIVED.items() if v[2] == "single_thread"),
            )
        )
        # The single-thread kernel's launch-wide call, through the launch-wide switch or not.
        pairs += tuple(
            (f"{k}:echo", "pingpong_floor", k, "echo")
            for k in (
                "single_thread",
                "single_thread_launch_pointer_dispatcher",
                "single_thread_answer_dispatcher",
                "single_thread_one_dispatcher",
                *(f"{p}_dispatcher" for p in CHOICE_PROBES),
            )
        )
        # The built-in kernel's thread-shaped call, on its block of 128 threads, alone, and
        # its leader loop in a one-thread kernel of its own (probe_serve_until).
        pairs += tuple(
            (f"{k}:echo_thread", "pingpong_floor", k, "echo_thread")
            for k in (
                "builtin",
                "builtin_1",
                "probe_serve_until",
                "probe_serve_until_readback",
                "probe_builtin_loop",
            )
        )
        # The cooperative kernel's thread-shaped call, staged in shared memory or not.
        pairs += tuple(
            (f"{k}:echo_thread", "pingpong_floor", k, "echo_thread")
            for k in ("cooperative_grid", "coop_stage_dispatcher")
        )
        # The multi-block kernels' launch-wide call and hand-off, each design paired too.
        pairs += tuple(
            (f"{k}:echo", "pingpong_floor", k, "echo")
            for k in ("cluster", "cooperative_grid", *multi)
        )
        measure(Library.from_cubin(cubin), plan, pairs)
        # The same module without the handler switch: every handler through the pointer.
        pointer = [
            ("single_thread@pointer", "single_thread", "echo"),
            ("single_thread:thread@pointer", "single_thread", "echo_thread"),
            ("single_thread:naive_echo_thread@pointer", "single_thread", "naive_echo_thread"),
        ]
        measure(Library.from_cubin(nvjitlink_link(inputs, arch)), pointer)
        # Issue #12's naive-handler goal in a module like a user's (own_module_sources), each
        # row paired with its floor from the probe module, as above.
        own = compile_lto(nvcc, work / "own", own_module_sources(work / "own"), stamps=stamps)
        measure(Library.from_cubin(nvjitlink_link(own, arch)), [], OWN_MODULE_PAIRS)

        def p50(label: str) -> float:
            return float(table[label]["round_trip_p50"]) if label in table else float("nan")

        def gap50(label: str) -> float:
            return float(table[label]["round_trip_gap_p50"]) if label in table else float("nan")

        # Paired: the median over rounds of (dispatcher p50 - naive_floor p50), each round
        # right after its floor's; the plan's one-off rows drift apart over the run.
        results["goals"] = {
            **naive_goals(
                results["paired"].get(naive_label, {}),
                "naive_handler_over_inlined",
                "round trip p50: the naive handler through the single-thread dispatcher "
                "(handler switch) minus the same byte loop inlined in a bare kernel (naive_floor), "
                "the median over rounds each measured right after a round of naive_floor",
                "the same with random arrival (see bench/dispatch.py GAP_NS)",
            ),
            **naive_goals(
                results["paired"].get(OWN_MODULE_PAIRS[0][0], {}),
                "naive_handler_over_inlined_own_module",
                "the same, the single-thread dispatcher in a module of example_app's sources "
                "and the naive handler alone (bench/phases.py own_module_sources: its handler "
                "switch holds only those handlers, where the probe module's also inlines "
                "FLOOR_CU's other thread-shaped probes)",
                "the same with random arrival",
            ),
        }
        naive, naive_gap, own_b2b, own_gap = (
            results["goals"][f"naive_handler_over_inlined{k}_us"]["value"]
            for k in ("", "_random_arrival", "_own_module", "_own_module_random_arrival")
        )
        results["naive_unpaired_us"] = {
            "back_to_back": p50("single_thread:naive_echo_thread") - p50("naive_floor"),
            "random_arrival": gap50("single_thread:naive_echo_thread") - gap50("naive_floor"),
        }
        # which handlers the switch calls directly (since session 11: both shapes)
        results["switch_shapes"] = ["thread", "launch"]
        results["switch_vs_pointer_us"] = {
            label: p50(f"{label}@pointer") - p50(label)
            for label in (
                "single_thread",
                "single_thread:thread",
                "single_thread:naive_echo_thread",
            )
        }
        print(
            f"naive handler over inlined: {naive:+.3f} us, random arrival {naive_gap:+.3f} us "
            f"(goal <= 0.1); in its own module {own_b2b:+.3f} us, random arrival "
            f"{own_gap:+.3f} us",
            file=sys.stderr,
        )
        bridge.close()
    bench.ok(drv.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {opts.out}", file=sys.stderr)
    return 0 if not results["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
