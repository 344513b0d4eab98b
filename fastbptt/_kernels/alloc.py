"""`vector` and `matrix_view`: a new 1-D array, and a 2-D view of a C-contiguous array,
inside a kernel, as ``np.empty(n, dtype)`` and ``a.reshape(n0, n1)`` make them, without
Numba's own.

Numba's ``np.empty`` compiles, per dtype, an overload and an allocator that live in
``numba.np.arrayobj``, and its ``reshape`` a helper there; a kernel that calls them
keeps a reference to their environments, which loading it from the cache rebuilds by
importing that module (30 to 50 ms of a new process's first call, on a Zen 3 core).
These write the same code (the runtime's aligned ``meminfo``, as ``np.empty`` takes; a
view sharing the array's memory and owner, as ``reshape`` gives) straight into the
calling kernel: nothing compiles on its own and nothing is imported when it loads.
"""
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic
from numba.core.imputils import impl_ret_borrowed, impl_ret_new_ref


def _element_type(kind):
    """The Numba type of the elements ``kind`` names: a NumPy scalar type (``np.int32``
    in a kernel is a ``NumberClass``) or an array's ``dtype`` (a ``DType``)."""
    if isinstance(kind, types.NumberClass):
        return kind.instance_type
    if isinstance(kind, types.DType):
        return kind.dtype
    return None


@intrinsic
def vector(typingctx, n, kind):
    """A new C-contiguous array of ``n`` elements of the type ``kind`` names (see
    `_element_type`), its values undefined, as ``np.empty(n, kind)``; ``n`` >= 0."""
    dtype = _element_type(kind)
    if not isinstance(n, types.Integer) or dtype is None:
        return None
    arrtype = types.Array(dtype, 1, "C")

    def codegen(context, builder, signature, args):
        from numba.np.arrayobj import make_array, populate_array   # compiling only

        intp = context.get_value_type(types.intp)
        count = context.cast(builder, args[0], signature.args[0], types.intp)
        itemsize = context.get_constant(types.intp,
                                        context.get_abi_sizeof(context.get_data_type(dtype)))
        align = context.get_constant(types.uint32,
                                     context.get_preferred_array_alignment(dtype))
        meminfo = context.nrt.meminfo_alloc_aligned(builder, builder.mul(count, itemsize),
                                                    align)
        data = context.nrt.meminfo_data(builder, meminfo)
        array = make_array(arrtype)(context, builder)
        populate_array(array,
                       data=builder.bitcast(data, context.get_data_type(dtype).as_pointer()),
                       shape=cgutils.pack_array(builder, [count], ty=intp),
                       strides=cgutils.pack_array(builder, [itemsize], ty=intp),
                       itemsize=itemsize, meminfo=meminfo)
        return impl_ret_new_ref(context, builder, arrtype, array._getvalue())

    return arrtype(n, kind), codegen


@intrinsic
def matrix_view(typingctx, a, n0, n1):
    """``a.reshape(n0, n1)`` of a C-contiguous array ``a``: a view of its memory, (n0, n1)
    C-contiguous. ValueError unless n0, n1 >= 0 and n0 n1 is a's size."""
    if not (isinstance(a, types.Array) and a.layout == "C" and
            isinstance(n0, types.Integer) and isinstance(n1, types.Integer)):
        return None
    viewtype = a.copy(ndim=2, layout="C")

    def codegen(context, builder, signature, args):
        from numba.np.arrayobj import make_array, populate_array   # compiling only

        intp = context.get_value_type(types.intp)
        src = make_array(a)(context, builder, args[0])
        rows = context.cast(builder, args[1], signature.args[1], types.intp)
        cols = context.cast(builder, args[2], signature.args[2], types.intp)
        size = context.get_constant(types.intp, 1)
        for extent in cgutils.unpack_tuple(builder, src.shape, a.ndim):
            size = builder.mul(size, extent)
        zero = context.get_constant(types.intp, 0)
        bad = builder.or_(builder.icmp_signed("!=", builder.mul(rows, cols), size),
                          builder.or_(builder.icmp_signed("<", rows, zero),
                                      builder.icmp_signed("<", cols, zero)))
        with builder.if_then(bad, likely=False):
            context.call_conv.return_user_exc(
                builder, ValueError, ("matrix_view: the shape does not hold the array's size",))
        view = make_array(viewtype)(context, builder)
        populate_array(view, data=src.data,
                       shape=cgutils.pack_array(builder, [rows, cols], ty=intp),
                       strides=cgutils.pack_array(builder, [builder.mul(cols, src.itemsize),
                                                            src.itemsize], ty=intp),
                       itemsize=src.itemsize, meminfo=src.meminfo, parent=src.parent)
        return impl_ret_borrowed(context, builder, viewtype, view._getvalue())

    return viewtype(a, n0, n1), codegen
