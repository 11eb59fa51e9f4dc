"""The GPU kernels of the everyday vocabulary against their CPU kernels, under
numba's CUDA simulator: the activations and their gradients, ``Erf``, and the
update ops of Adadelta, FTRL (with and without shrinkage, both learning-rate
powers), the proximal optimizers and Adagrad-DA.

Runs only in a process started with ``NUMBA_ENABLE_CUDASIM=1``
(``tests/test_vocabulary_ops.py`` starts one); collected otherwise, it skips
without importing numba. Shapes are small: the simulator runs each CUDA
thread as a Python thread.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    pytest.skip("runs in a subprocess with NUMBA_ENABLE_CUDASIM=1 (see test_vocabulary_ops.py)",
                allow_module_level=True)

RNG = np.random.default_rng(7)


def _x(*shape, dtype=np.float32):
    return (RNG.standard_normal(shape) * 4).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op,attrs", [("Elu", {}), ("Selu", {}), ("Relu6", {}),
                                      ("LeakyRelu", {"alpha": 0.3}), ("Softplus", {}),
                                      ("Softsign", {}), ("Erf", {})])
def test_activation_matches_cpu(op, attrs, dtype):
    import kernels
    from kernels.cuda.devices import to_device, to_host
    x = _x(5, 7, dtype=dtype)
    x[0, :3] = [0.0, 6.0, -0.0]
    cpu = kernels.get_kernel(op, "CPU")([x], attrs)[0]
    gpu = to_host(kernels.get_kernel(op, "GPU")([to_device(x)], attrs)[0])
    assert gpu.dtype == cpu.dtype
    np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,attrs", [("EluGrad", {}), ("SeluGrad", {}), ("Relu6Grad", {}),
                                      ("LeakyReluGrad", {"alpha": 0.1}), ("SoftplusGrad", {}),
                                      ("SoftsignGrad", {})])
def test_activation_gradient_matches_cpu(op, attrs):
    import kernels
    from kernels.cuda.devices import to_device, to_host
    g, f = _x(4, 6), _x(4, 6)
    cpu = kernels.get_kernel(op, "CPU")([g, f], attrs)[0]
    gpu = to_host(kernels.get_kernel(op, "GPU")([to_device(g), to_device(f)], attrs)[0])
    np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)


UPDATES = {
    "ApplyAdadelta": (2, [0.5, 0.9, 1e-6]),
    "ApplyFtrl": (2, [2.0, 0.01, 0.5, -0.5]),
    "ApplyFtrlV2": (2, [2.0, 0.01, 0.5, 0.1, -0.3]),
    "ApplyProximalAdagrad": (1, [0.3, 0.01, 0.2]),
    "ApplyProximalGradientDescent": (0, [0.3, 0.05, 0.2]),
    "ApplyAdagradDA": (2, [0.3, 0.01, 0.2, 3.0]),
}


@pytest.mark.parametrize("op", sorted(UPDATES))
def test_update_matches_cpu_in_place(op):
    import kernels
    from kernels.cuda.devices import to_device, to_host
    n_slots, hyper = UPDATES[op]
    var = _x(3, 5)
    slots = [np.abs(_x(3, 5)) + 0.1 for _ in range(n_slots)]
    grad = _x(3, 5)
    hyper_arrays = [np.array(h, np.float32) for h in hyper]
    if op in ("ApplyFtrl", "ApplyFtrlV2", "ApplyAdagradDA"):   # grad first, then scalars
        args = [grad, *hyper_arrays]
    else:
        args = [*hyper_arrays, grad]
    cpu_state = [var.copy(), *[s.copy() for s in slots]]
    kernels.get_kernel(op, "CPU")([*cpu_state, *[a.copy() for a in args]], {})
    dev_state = [to_device(s) for s in (var, *slots)]
    out = kernels.get_kernel(op, "GPU")([*dev_state, *args], {})
    assert out[0] is dev_state[0]
    for c, d in zip(cpu_state, dev_state):
        np.testing.assert_allclose(to_host(d), c, rtol=2e-5, atol=1e-6)
