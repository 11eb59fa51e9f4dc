"""The CUDA wing: numba.cuda kernels for GPUs, and the GPU's device handling.

- ``loader``: imports the GPU kernels on the first GPU lookup (numba-free);
- ``options``: the choices the runtime hands the GPU kernels (numba-free);
- ``devices``: GPU discovery, a thread's current GPU, host/device copies
  (numba imported inside its functions);
- ``memory``: the caching device allocator and counted copies (likewise);
- ``launch``: every kernel launch, counted, and the host fallback;
- ``elementwise`` (+ device code in ``math``), ``nn``, ``matmul``: the
  kernels, which import numba;
- ``fusion``: GPU patterns fused before a partition compiles.

Imports nothing, so the runtime may import the numba-free modules above
without loading numba. This wing may import the CPU wing (its host
fallbacks) and the shared modules at the top of ``kernels``, never the
reverse (tests/test_layout.py).
"""
