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
        **_space_intrinsics(),
    }


def _space_intrinsics() -> dict[str, Any]:
    """What the device header tells the compiler with ``__isShared``/``__isGlobal``,
    ``__builtin_assume`` and ``__builtin_assume_aligned``, and a call through a handler's
    address (cudaq_detail_call_direct), for the framing helpers of
    :mod:`skbuild_cudaq.numba.dispatch`."""
    from llvmlite import ir
    from numba.cuda import extending, types

    intrinsic: Any = extending.intrinsic
    i1, i32, i64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
    byte_ptr = ir.IntType(8).as_pointer()

    def declare(builder: Any, name: str, fnty: Any) -> Any:
        module = builder.module
        return module.globals.get(name) or ir.Function(module, fnty, name)

    def space_test(builder: Any, name: str, address: Any) -> Any:
        test = declare(builder, f"llvm.nvvm.isspacep.{name}", ir.FunctionType(i1, [byte_ptr]))
        return builder.call(test, [builder.inttoptr(address, byte_ptr)])

    def assume(builder: Any, cond: Any) -> None:
        builder.call(declare(builder, "llvm.assume", ir.FunctionType(ir.VoidType(), [i1])), [cond])

    def known_spaces(typingctx: Any, request: Any, response: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            shared = space_test(builder, "shared", args[0])
            return builder.and_(shared, space_test(builder, "global", args[1]))

        return types.boolean(types.uint64, types.uint64), codegen

    def assume_known_spaces(typingctx: Any, request: Any, response: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            assume(builder, space_test(builder, "shared", args[0]))
            assume(builder, space_test(builder, "global", args[1]))
            return context.get_dummy_value()

        return types.void(types.uint64, types.uint64), codegen

    def assume_aligned8(typingctx: Any, address: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            low = builder.and_(args[0], ir.Constant(i64, 7))
            assume(builder, builder.icmp_unsigned("==", low, ir.Constant(i64, 0)))
            return context.get_dummy_value()

        return types.void(types.uint64), codegen

    def offset(typingctx: Any, pointer: Any, count: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.gep(args[0], [builder.zext(args[1], i64)])

        return types.voidptr(types.voidptr, types.uint32), codegen

    def call_address(  # noqa: PLR0917 - the handler's address and its five arguments
        typingctx: Any,
        handler: Any,
        args: Any,
        arg_len: Any,
        result: Any,
        max_len: Any,
        length: Any,
    ) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, values: Any) -> Any:
            fnty = ir.FunctionType(i32, [byte_ptr, i32, byte_ptr, i32, i32.as_pointer()])
            function = builder.inttoptr(values[0], fnty.as_pointer())
            length_ptr = builder.bitcast(values[5], i32.as_pointer())
            return builder.call(function, [values[1], values[2], values[3], values[4], length_ptr])

        vp, u32 = types.voidptr, types.uint32
        return types.int32(types.uint64, vp, u32, vp, u32, vp), codegen

    return {
        "known_spaces": intrinsic(known_spaces),
        "assume_known_spaces": intrinsic(assume_known_spaces),
        "assume_aligned8": intrinsic(assume_aligned8),
        "call_address": intrinsic(call_address),
        "offset": intrinsic(offset),
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
    from numba.cuda import extending, types
    from numba.cuda.np.numpy_support import carray

    from skbuild_cudaq.numba import dispatch

    overload: Any = extending.overload
    ops = pointer_intrinsics()
    hooks = _hooks()
    as_ptr, as_int, data_ptr = ops["as_ptr"], ops["as_int"], ops["data_ptr"]
    known_spaces, assume_known_spaces = ops["known_spaces"], ops["assume_known_spaces"]
    assume_aligned8, call_address = ops["assume_aligned8"], ops["call_address"]
    offset = ops["offset"]
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

    # The framing reads and writes the headers as the device header does: three 8-byte
    # words (after inlining, the reads right after a poll are served from the registers the
    # staging stored; the response header is three stores to memory that may be mapped
    # over PCIe, where each store is a transaction), with 32-bit unsigned indices (no
    # negative-index wraparound, no 64-bit index math).
    low32, high32 = np.uint64(0xFFFFFFFF), np.uint64(0xFFFFFFFF00000000)
    magic_response = np.uint64(_MAGIC_RESPONSE)
    header_size = dispatch.HEADER_SIZE

    def jit(function: Any) -> Any:
        return cuda.jit(device=True, forceinline=True)(function)

    @jit
    def lookup(entries: Any, table_count: Any, function_id: Any) -> Any:
        e = np.uint32(0)
        while e < table_count:
            id_mode = entries[np.uint32(e + e + np.uint32(1))]  # function_id | mode << 32
            if np.uint32(id_mode & low32) == function_id:  # the first entry of the id, as C++'s
                handler = entries[np.uint32(e + e)]
                if np.uint8(id_mode >> np.uint64(32)) != 0 or handler == 0:  # not DEVICE_CALL
                    break
                return np.int32(0), handler, np.uint8(id_mode >> np.uint64(40))
            e = np.uint32(e + np.uint32(1))
        return np.int32(-2), np.uint64(0), np.uint8(0)

    def _validate(
        request: Any, slot_size: Any, table: Any, table_count: Any, cache: Any = None
    ) -> Any:
        def check(request: Any, slot_size: Any) -> Any:
            head = carray(as_ptr(request), 3, np.uint64)
            w0, w1 = head[0], head[1]
            status = np.int32(0)
            if np.uint32(w0 & low32) != _MAGIC_REQUEST:
                status = np.int32(-1)
            elif np.uint32(w1 & low32) > np.uint32(slot_size - header_size):
                status = np.int32(-3)
            return status, np.uint32(w0 >> np.uint64(32))

        def find(status: Any, function_id: Any, table: Any, table_count: Any) -> Any:
            if status != 0:
                return status, np.uint64(0), np.uint8(0)
            count = np.uint32(table_count)
            entries = carray(as_ptr(as_int(table)), count * np.uint32(2), np.uint64)
            return lookup(entries, count, function_id)

        check, find = (jit(f) for f in (check, find))
        if isinstance(cache, (types.NoneType, types.Omitted)) or cache is None:

            def impl(
                request: Any, slot_size: Any, table: Any, table_count: Any, cache: Any = None
            ) -> Any:
                status, function_id = check(request, slot_size)
                return find(status, function_id, table, table_count)

            return impl

        def impl_cached(
            request: Any, slot_size: Any, table: Any, table_count: Any, cache: Any = None
        ) -> Any:
            # cudaq_validate_request_cached: a request for the function looked up last is
            # valid without a lookup (the table does not change while the kernel runs)
            status, function_id = check(request, slot_size)
            if status == 0 and cache[0] != 0 and function_id == cache[1]:
                return status, cache[0], np.uint8(cache[2])
            status, handler, shape = find(status, function_id, table, table_count)
            if status == 0:
                cache[0], cache[1], cache[2] = handler, function_id, shape
            return status, handler, shape

        return impl_cached

    def _lookup_cache() -> Any:
        def impl() -> Any:
            cache = cuda.local.array(3, np.uint64)  # handler (0: empty), function id, shape
            cache[0] = 0
            cache[1] = 0
            cache[2] = 0
            return cache

        return impl

    def _call(handler: Any, shape: Any, request: Any, response: Any, max_result: Any) -> Any:
        def impl(handler: Any, shape: Any, request: Any, response: Any, max_result: Any) -> Any:
            # cudaq_call_handler / cudaq_call_launch_handler: both 8-byte aligned (the
            # contract of a poll); a thread-shaped handler with the request in shared memory
            # and the response in global memory goes through the switch with both spaces
            # known (its arguments read with shared-memory loads issued ahead of its global
            # stores), any other request through the pointer.
            assume_aligned8(request)
            assume_aligned8(response)
            arg_len = np.uint32(carray(as_ptr(request), 3, np.uint64)[1] & low32)
            # the same pointers the spaces are known of, offset (not new integers)
            args = offset(as_ptr(request), np.uint32(header_size))
            result = offset(as_ptr(response), np.uint32(header_size))
            limit = np.uint32(max_result)
            length = cuda.local.array(1, np.uint32)  # each call its own: see call_address
            length[0] = 0
            to = as_ptr(handler)
            if shape != 1:
                status = call_launch(to, args, arg_len, result, limit, data_ptr(length))
            elif known_spaces(request, response):
                assume_known_spaces(request, response)
                status = call_thread(to, args, arg_len, result, limit, data_ptr(length))
            else:
                other = cuda.local.array(1, np.uint32)
                other[0] = 0
                status = call_address(handler, args, arg_len, result, limit, data_ptr(other))
                length[0] = other[0]
            n = length[0]
            return status, n if n < limit else limit

        return impl

    @jit
    def write(response: Any, request: Any, status: Any, result_len: Any) -> None:
        head = carray(as_ptr(request), 3, np.uint64)
        out = carray(as_ptr(response), 3, np.uint64)
        out[0] = magic_response | (np.uint64(np.uint32(np.int32(status))) << np.uint64(32))
        out[1] = np.uint64(np.uint32(result_len)) | (head[1] & high32)  # the request id echoed
        out[2] = head[2]  # the timestamp echoed

    def _header(response: Any, request: Any, status: Any, result_len: Any) -> Any:
        def impl(response: Any, request: Any, status: Any, result_len: Any) -> Any:
            assume_aligned8(request)
            assume_aligned8(response)
            if known_spaces(request, response):  # as write_response_header
                assume_known_spaces(request, response)
                write(response, request, status, result_len)
            else:
                write(response, request, status, result_len)

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
        (dispatch.lookup_cache, _lookup_cache),
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
