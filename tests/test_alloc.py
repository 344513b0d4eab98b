"""`_kernels.alloc`: the kernels' own ``np.empty(n, dtype)`` and ``a.reshape(n0, n1)``."""
import gc

import numpy as np
import pytest

from fastbptt._kernels._jit import jit
from fastbptt._kernels.alloc import matrix_view, vector


@jit(cache=False)
def _vectors(n, like):
    a, b, c = vector(n, np.int32), vector(n, like.dtype), vector(n, np.uint8)
    for i in range(n):
        a[i], b[i], c[i] = i, 0.5 * i, 255 - i
    return a, b, c


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 7, 300])
def test_vector_is_a_new_array_of_the_type_asked(n, dtype):
    a, b, c = _vectors(n, np.zeros(2, dtype))
    assert (a.dtype, b.dtype, c.dtype) == (np.int32, dtype, np.uint8)
    assert a.shape == b.shape == c.shape == (n,)
    assert all(x.flags.c_contiguous and x.flags.writeable for x in (a, b, c))
    np.testing.assert_array_equal(a, np.arange(n))
    np.testing.assert_array_equal(b, 0.5 * np.arange(n))
    np.testing.assert_array_equal(c, (255 - np.arange(n)) % 256)
    assert b.ctypes.data % 8 == 0


@jit(cache=False)
def _view(a, n0, n1):
    return matrix_view(a, n0, n1)


@jit(cache=False)
def _view_of_new(n0, n1):
    return matrix_view(vector(n0 * n1, np.float64), n0, n1)


@pytest.mark.parametrize("shape, view", [((3, 4, 5), (12, 5)), ((3, 4, 5), (3, 20)),
                                         ((60,), (6, 10)), ((2, 3), (6, 1)), ((0, 4), (0, 7))])
def test_matrix_view_is_reshape_sharing_the_memory(shape, view):
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    v = _view(a, *view)
    np.testing.assert_array_equal(v, a.reshape(view))
    assert v.flags.c_contiguous and v.shape == view
    if v.size:
        v[-1, -1] = -1.0
        assert a.reshape(-1)[-1] == -1.0


def test_a_view_keeps_its_arrays_memory_alive():
    v = _view_of_new(50, 40)
    gc.collect()
    v[:] = 2.0
    big = [np.ones(1 << 16) for _ in range(20)]      # memory freed would be reused here
    assert big[0][0] == 1.0 and float(v.sum()) == 4000.0


@pytest.mark.parametrize("view", [(5, 5), (13, 2), (-2, -12), (-1, 24), (0, 24)])
def test_matrix_view_refuses_a_shape_of_another_size(view):
    with pytest.raises(ValueError, match="matrix_view: the shape does not hold"):
        _view(np.zeros((4, 6)), *view)
