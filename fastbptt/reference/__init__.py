"""The readable NumPy reference: per-step loops, written to be read next to SPEC.md.

Not fast. Each sequence runs alone, one step at a time, in four rooms:

- `cells`: one step of the Elman, LSTM and GRU cells, forward and backward (§1, §6);
- `layer`: one direction's time loop over one sequence and its backward sweep, with the
  truncation rule lo(t) of §3 (`window_start`, `windows`);
- `stack`: layers and directions (§8) and the layer VJP of §7 (`layer_vjp`,
  `layer_forward`, as `fastbptt.layer.vjp` and `fastbptt.layer.forward`);
- `head`: the output layer and loss of §1-§2 as one consumer of that VJP (`bptt`, `grad`,
  `value_and_grad`, as the package's).

Every function takes the same arguments as its counterpart in the package and returns
the same types. The tests and the benchmarks compare the kernels with it, and the tests
check it against finite differences (`fastbptt.check_grad`) and against PyTorch.
"""
from .cells import activate, derivative
from .head import bptt, grad, output, output_error, value_and_grad
from .layer import window_start, windows
from .stack import input_column, layer_forward, layer_vjp

__all__ = ["bptt", "grad", "value_and_grad", "layer_vjp", "layer_forward", "window_start",
           "windows", "activate", "derivative", "output", "output_error", "input_column"]
