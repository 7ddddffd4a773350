"""Dispatch kernels written in Python: the device side of :mod:`skbuild_cudaq.numba.dispatch`
and the kernel entry.

The hooks are the run time's ``extern "C"`` device functions, declared to numba-cuda with the
C ABI (``cuda.declare_device(..., abi="c")``): nvJitLink resolves them against the bridge and
the module's handler switch and inlines them, as it does for a ``.cu`` kernel. The framing
(validation, table lookup, response header) is written here in Python over ``carray`` views of
the ring's memory.

numba-cuda compiles device functions and its own (mangled) kernels; a dispatch kernel needs an
``extern "C"`` entry with the contract's six parameters. So the user's function is compiled as
a C-ABI device function ``<name>_body``, and an intrinsic in it adds the entry ``<name>``: a
kernel (``nvvm.annotations``) that calls it, kept through LTO by ``@llvm.used``.
"""

from __future__ import annotations

from typing import Any

from skbuild_cudaq.numba import PyKernel

__all__ = ["compile_kernel", "pointer_intrinsics", "register_dispatch"]

_registered: list[bool] = []
_MAGIC_REQUEST = 0x43555152
_MAGIC_RESPONSE = 0x43555153


_made: dict[str, Any] = {}


def pointer_intrinsics() -> dict[str, Any]:
    """:func:`_intrinsics`, made once (numba-cuda keeps what it compiled with them)."""
    if not _made:
        _made.update(_intrinsics())
    return _made


def _intrinsics() -> dict[str, Any]:
    """Address arithmetic numba has no words for: an integer as a pointer and back, and the
    address of a local array's data."""
    from llvmlite import ir
    from numba.cuda import extending, types

    intrinsic: Any = extending.intrinsic
    byte_ptr = ir.IntType(8).as_pointer()

    def as_ptr(typingctx: Any, x: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.inttoptr(args[0], byte_ptr)

        return types.voidptr(types.uint64), codegen

    def as_int(typingctx: Any, p: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            if isinstance(sig.args[0], types.Integer):
                return (
                    builder.zext(args[0], ir.IntType(64))
                    if sig.args[0].bitwidth < 64
                    else (args[0])
                )
            return builder.ptrtoint(args[0], ir.IntType(64))

        return types.uint64(p), codegen

    def data_ptr(typingctx: Any, arr: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            array = context.make_array(sig.args[0])(context, builder, args[0])
            return builder.bitcast(array.data, byte_ptr)

        return types.voidptr(arr), codegen

    return {
        "as_ptr": intrinsic(as_ptr),
        "as_int": intrinsic(as_int),
        "data_ptr": intrinsic(data_ptr),
    }


def _hooks() -> dict[str, Any]:
    from numba import cuda
    from numba.cuda import types

    vp, u32, i32 = types.voidptr, types.uint32, types.int32
    call = i32(vp, vp, u32, vp, u32, vp)
    return {
        "enter": cuda.declare_device("cudaq_dev_enter_kernel", vp(vp, vp), abi="c"),
        "poll": cuda.declare_device("cudaq_dev_rx_poll", i32(vp, vp, vp), abi="c"),
        "poll_into": cuda.declare_device(
            "cudaq_dev_rx_poll_into", i32(vp, vp, vp, vp, u32, i32), abi="c"
        ),
        "publish": cuda.declare_device("cudaq_dev_tx_publish", types.void(vp, vp), abi="c"),
        "call_thread": cuda.declare_device("cudaq_dev_call_handler", call, abi="c"),
        "call_launch": cuda.declare_device("cudaq_dev_call_launch_handler", call, abi="c"),
    }


def register_dispatch() -> None:  # noqa: PLR0915 - one overload per helper, each short
    """Teach numba-cuda the functions of :mod:`skbuild_cudaq.numba.dispatch` (once)."""
    if _registered:
        return
    import numpy as np
    from numba import cuda
    from numba.cuda import extending
    from numba.cuda.np.numpy_support import carray

    from skbuild_cudaq.numba import dispatch

    overload: Any = extending.overload
    ops = pointer_intrinsics()
    hooks = _hooks()
    as_ptr, as_int, data_ptr = ops["as_ptr"], ops["as_int"], ops["data_ptr"]
    enter, poll, poll_into = hooks["enter"], hooks["poll"], hooks["poll_into"]
    publish, call_thread, call_launch = hooks["publish"], hooks["call_thread"], hooks["call_launch"]

    def _enter(transport_ctx: Any, shutdown_flag: Any) -> Any:
        def impl(transport_ctx: Any, shutdown_flag: Any) -> Any:
            return as_int(enter(as_ptr(as_int(transport_ctx)), as_ptr(as_int(shutdown_flag))))

        return impl

    def _rx_poll(session: Any) -> Any:
        def impl(session: Any) -> Any:
            slots = cuda.local.array(2, np.uint64)
            slots[0] = 0
            slots[1] = 0
            running = poll(as_ptr(session), data_ptr(slots[0:1]), data_ptr(slots[1:2]))
            return running, slots[0], slots[1]

        return impl

    def _rx_poll_into(session: Any, stage: Any) -> Any:
        def impl(session: Any, stage: Any) -> Any:
            slots = cuda.local.array(2, np.uint64)
            slots[0] = 0
            slots[1] = 0
            running = poll_into(
                as_ptr(session), data_ptr(slots[0:1]), data_ptr(slots[1:2]), data_ptr(stage),
                np.uint32(stage.size), np.int32(1),
            )  # fmt: skip
            return running, slots[0], slots[1]

        return impl

    def _publish(session: Any, response: Any) -> Any:
        def impl(session: Any, response: Any) -> Any:
            publish(as_ptr(session), as_ptr(response))

        return impl

    def _validate(request: Any, slot_size: Any, table: Any, table_count: Any) -> Any:
        def impl(request: Any, slot_size: Any, table: Any, table_count: Any) -> Any:
            head = carray(as_ptr(request), 3, np.uint32)
            if head[0] != _MAGIC_REQUEST:
                return np.int32(-1), np.uint64(0), np.uint8(0)
            if head[2] > slot_size - dispatch.HEADER_SIZE:
                return np.int32(-3), np.uint64(0), np.uint8(0)
            function_id = head[1]
            entries = carray(as_ptr(as_int(table)), table_count * 16, np.uint8)
            words = carray(as_ptr(as_int(table)), table_count * 4, np.uint32)
            for e in range(table_count):
                if words[4 * e + 2] == function_id:  # the first entry of the id, as C++'s
                    low, high = np.uint64(words[4 * e]), np.uint64(words[4 * e + 1])
                    handler = low | (high << np.uint64(32))
                    if entries[16 * e + 12] != 0 or handler == 0:  # not DEVICE_CALL
                        break
                    return np.int32(0), handler, entries[16 * e + 13]
            return np.int32(-2), np.uint64(0), np.uint8(0)

        return impl

    def _call(handler: Any, shape: Any, request: Any, response: Any, max_result: Any) -> Any:
        def impl(handler: Any, shape: Any, request: Any, response: Any, max_result: Any) -> Any:
            length = cuda.local.array(1, np.uint32)
            length[0] = 0
            head = carray(as_ptr(request), 3, np.uint32)
            args = as_ptr(request + np.uint64(dispatch.HEADER_SIZE))
            result = as_ptr(response + np.uint64(dispatch.HEADER_SIZE))
            if shape == 1:
                status = call_thread(
                    as_ptr(handler), args, head[2], result, np.uint32(max_result), data_ptr(length)
                )
            else:
                status = call_launch(
                    as_ptr(handler), args, head[2], result, np.uint32(max_result), data_ptr(length)
                )
            return status, length[0]

        return impl

    def _header(response: Any, request: Any, status: Any, result_len: Any) -> Any:
        def impl(response: Any, request: Any, status: Any, result_len: Any) -> Any:
            head = carray(as_ptr(request), 6, np.uint32)
            out = carray(as_ptr(response), 6, np.uint32)
            out[0] = _MAGIC_RESPONSE
            out[1] = np.uint32(np.int32(status))
            out[2] = np.uint32(result_len)
            out[3] = head[3]
            out[4] = head[4]
            out[5] = head[5]

        return impl

    def _to_shared(table: Any, table_count: Any, shared: Any) -> Any:
        def impl(table: Any, table_count: Any, shared: Any) -> Any:
            size = table_count * 16
            if size > shared.size:
                return as_int(table)
            words = carray(as_ptr(as_int(table)), table_count * 4, np.uint32)
            into = carray(data_ptr(shared), table_count * 4, np.uint32)
            for i in range(table_count * 4):
                into[i] = words[i]
            return as_int(data_ptr(shared))

        return impl

    def _count(stats: Any) -> Any:
        def impl(stats: Any) -> Any:
            cuda.atomic.add(carray(as_ptr(as_int(stats)), 1, np.uint64), 0, np.uint64(1))

        return impl

    for function, typer in (
        (dispatch.enter_kernel, _enter),
        (dispatch.rx_poll, _rx_poll),
        (dispatch.rx_poll_into, _rx_poll_into),
        (dispatch.tx_publish, _publish),
        (dispatch.table_to_shared, _to_shared),
        (dispatch.validate_request, _validate),
        (dispatch.call_handler, _call),
        (dispatch.write_response_header, _header),
        (dispatch.count_request, _count),
    ):
        overload(function, target="cuda", inline="always")(typer)
    _registered.append(True)


def _entry_intrinsic(name: str) -> Any:
    """An intrinsic that, called in ``<name>_body``, adds the kernel ``<name>`` calling it."""
    from llvmlite import ir
    from numba.cuda import extending, types

    intrinsic: Any = extending.intrinsic

    def entry(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            module, body = builder.module, builder.function
            kernel = ir.Function(
                module, ir.FunctionType(ir.VoidType(), body.function_type.args), name
            )
            build = ir.IRBuilder(kernel.append_basic_block("entry"))
            build.call(body, kernel.args)
            build.ret_void()
            note = module.add_metadata([kernel, "kernel", ir.Constant(ir.IntType(32), 1)])
            module.add_named_metadata("nvvm.annotations", note)
            byte_ptr = ir.IntType(8).as_pointer()
            used = ir.GlobalVariable(module, ir.ArrayType(byte_ptr, 1), "llvm.used")
            used.linkage = "appending"
            used.section = "llvm.metadata"
            used.initializer = ir.Constant(used.value_type, [kernel.bitcast(byte_ptr)])
            return context.get_dummy_value()

        return types.void(), codegen

    return intrinsic(entry)


def compile_kernel(k: PyKernel, arch: int, cc_target: Any) -> bytes:
    """The LTO-IR of dispatch kernel ``k`` for ``sm_<arch>`` (inside ``cc_target``, the
    compile's current-device answer)."""
    from numba import cuda
    from numba.cuda import types

    register_dispatch()
    entry = _entry_intrinsic(k.name)
    body_of_user = cuda.jit(device=True)(k.function)

    def body(a: Any, b: Any, c: Any, d: Any, e: Any, f: Any) -> Any:  # noqa: PLR0917 - the contract's six
        entry()
        body_of_user(a, b, c, d, e, f)
        return 0

    vp, u32 = types.voidptr, types.uint32
    with cc_target:
        ltoir, _ = cuda.compile(
            body,
            types.int32(vp, u32, vp, u32, vp, vp),
            device=True,
            abi="c",
            abi_info={"abi_name": f"{k.name}_body"},
            output="ltoir",
            cc=(arch // 10, arch % 10),
        )
    return bytes(ltoir)
