"""Benchmarks of fastbptt against the documents' loop, PyTorch and JAX.

Imported only by ``fastbptt bench``, ``benchmarks/`` (pytest-benchmark) and
``benchmarks/asv/`` (asv); ``import fastbptt`` never loads it, and nothing here imports
PyTorch, JAX, matplotlib or tqdm until a measurement asks for them.

- `workloads`: the fixed workloads W1 ... W5, S1 ... S3, G1 ... G5, their seeded data and
  flop counts; `stacks`: the stacked and gated workloads' weights, as a `fastbptt.Model`.
- `peers`: the one registry of implementations (fastbptt, the documents' loop, PyTorch,
  JAX) that the command and both suites time, and the thread control for all of them.
  Each family is a module: `torch_peer` and `jax_peer` run W1 ... W5, `torch_stack`,
  `jax_stack` and `fastbptt_stack` the stacked, gated and layer workloads.
- `agreement`: checks a peer's loss and gradients against fastbptt's before it is timed.
- `timing`: medians of repeated calls, the gemm peak of this process, machine info.
- `startup`: warm start, cold compile and W5 peak memory, each in a fresh subprocess.
- `runner` and `report`: the ``fastbptt bench`` command: measure, then print, save, plot.
"""
