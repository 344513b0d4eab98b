"""Numba kernels. Private: they trust their arguments, which `fastbptt._inputs` has checked."""
