"""Numba kernels. Private: they trust their arguments, which `fastbptt._inputs` has checked."""
import numba as _numba

from .. import _DISABLED_JIT_CONFIG, JitDisabledError

if _numba.config.DISABLE_JIT:           # set by a .numba_config.yaml, say
    raise JitDisabledError(_DISABLED_JIT_CONFIG)
