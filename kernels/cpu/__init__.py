"""The CPU wing: numpy kernels for every op of docs/ops.md except the
stateful ones and ``_Send/_Recv``.

- ``array``: sources (``Const``, ``Zeros``, ...), shape ops (``Reshape``,
  ``Transpose``, ``Tile``, ...), and joining and cutting (``ConcatV2``,
  ``SliceAxis``);
- ``math``: elementwise and reduction ops, ``Cast``, the random ops, and the
  in-place variants the executor may use (``IN_PLACE``);
- ``nn``: MatMul, softmax and losses, the nn ops and their gradients;
- ``update``: the optimizers' ``Apply*`` update rules, in place;
- ``fused`` (+ ``fused_jit``, numba): ``_FusedElementwise``, a chain the graph
  optimizer fused.

Imports nothing: ``loader`` imports the modules that register, on the first
CPU lookup (``kernels.registry.LOADERS``); this wing imports only the shared modules at the top of ``kernels``,
never the CUDA wing (tests/test_layout.py).
"""
