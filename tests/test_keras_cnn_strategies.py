"""BatchNormalization's moving statistics, and a small CNN's fit, under every
strategy distrib has: MirroredStrategy (two logical CPUs), MultiWorkerMirrored-
Strategy (two worker processes) and ParameterServerStrategy (servers in this
process).

What TF does, stated (tf_keras' BatchNormalization, TF's values.py): the moving
statistics are non-trainable and aggregated by MEAN; each replica moves them
toward its own batch's statistics, and what any cross-replica read gives
(``evaluate`` on one replica, ``get_weights``, ``save``) is the mean of the
replicas' moved values. ``synchronized=True`` (``SyncBatchNormalization``)
computes the batch statistics of the global batch with an all-reduce, so the
replicas move them exactly as one replica on the whole batch would, and a
model trains as it does on one replica. Under ParameterServerStrategy each
worker's step updates the ps variable.

The expected values are numpy's, from the batch the step saw: replica 0 takes
the first half of each global batch, replica 1 the second."""
from __future__ import annotations

import asyncio
import contextlib
import json

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.core.values import local_results
from tests.helpers import run_workers
from tests.test_keras_cnn import small_cnn, stripes
from tests.test_keras_ps import ps_strategy

keras = dt.keras
L = keras.layers
BOUND_S = 90
MOMENTUM = 0.5

pytestmark = pytest.mark.usefixtures("fresh_keras")


def images(n: int = 8, seed: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(1.0, 2.0, size=(n, 4, 4, 3)).astype(np.float32)
    x[n // 2:] = x[n // 2:] * 3.0 - 2.0   # the two halves' statistics differ
    return x, rng.normal(size=(n, 1)).astype(np.float32)


def bn_model(strategy, layer) -> keras.Sequential:
    dt.set_random_seed(3)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = keras.Sequential([layer(momentum=MOMENTUM, input_shape=(4, 4, 3)), L.Flatten(),
                                  L.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model


async def copies(variable) -> list[np.ndarray]:
    return [np.asarray(v) for v in
            await dt.function(lambda: [c.read_value() for c in local_results(variable)])()]


def moved(batch_stats: np.ndarray, initial: float) -> np.ndarray:
    return MOMENTUM * initial + (1 - MOMENTUM) * batch_stats


# -- MirroredStrategy ----------------------------------------------------------------------------
@pytest.mark.parametrize("sync", [False, True], ids=["plain", "synchronized"])
async def test_mirrored_moving_statistics_are_equal_and_averaged(two_cpus, sync) -> None:
    x, y = images()
    layer = L.experimental.SyncBatchNormalization if sync else L.BatchNormalization
    async with asyncio.timeout(BOUND_S):
        model = bn_model(dt.distribute.MirroredStrategy(), layer)
        await model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        bn = model.layers[0]
        means, variances = await copies(bn.moving_mean), await copies(bn.moving_variance)
    assert len(means) == 2
    halves = (x[:4], x[4:])
    if sync:   # one replica on the whole batch
        want_mean, want_var = x.mean((0, 1, 2)), x.var((0, 1, 2))
    else:      # the mean of the replicas' updates
        want_mean = np.mean([h.mean((0, 1, 2)) for h in halves], axis=0)
        want_var = np.mean([h.var((0, 1, 2)) for h in halves], axis=0)
        assert not np.allclose(want_var, x.var((0, 1, 2)), rtol=1e-2)   # the two differ
    for mean, var in zip(means, variances):
        np.testing.assert_allclose(mean, moved(want_mean, 0.0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(var, moved(want_var, 1.0), rtol=1e-5)
    np.testing.assert_array_equal(means[0], means[1])
    np.testing.assert_array_equal(variances[0], variances[1])


async def test_mirrored_sync_batch_norm_cnn_fits_as_one_replica_does(two_cpus) -> None:
    """Synchronized statistics and summed gradients: two replicas train the CNN to
    the weights, moving statistics and losses of one process on the same batches.
    (SGD: the convolution's bias before a batch norm has a gradient of rounding
    noise only, which Adam would scale up to full steps.)"""
    x, y = stripes(64)
    runs = []
    async with asyncio.timeout(BOUND_S):
        for strategy in (None, dt.distribute.MirroredStrategy()):
            dt.reset_default_graph()
            with strategy.scope() if strategy is not None else contextlib.nullcontext():
                model = small_cnn(L.experimental.SyncBatchNormalization,
                                  keras.optimizers.SGD(0.1, momentum=0.9))
            history = await model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
            runs.append((history.history["loss"], await model.get_weights()))
        first, second = await copies(model.layers[1].moving_variance)
    np.testing.assert_array_equal(first, second)   # both replicas' copies
    (want_loss, want), (loss, got) = runs
    np.testing.assert_allclose(loss, want_loss, rtol=1e-4)
    assert loss[-1] < loss[0]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


# -- ParameterServerStrategy ---------------------------------------------------------------------
async def test_parameter_server_steps_move_the_ps_statistics() -> None:
    """Every batch alike, so k updates leave ``(1 - momentum ** k) * mean`` on the
    ps. The two workers' steps update it unsynchronized, as in TF (a step may
    read the value another is about to replace), so k is between 1 and the 3
    steps run: the same k for the mean and the variance of every channel."""
    one, y1 = images(8)
    x, y = np.concatenate([one] * 4), np.concatenate([y1] * 4)
    async with ps_strategy() as strategy:
        async with asyncio.timeout(BOUND_S):
            model = bn_model(strategy, L.BatchNormalization)
            await model.fit(x, y, batch_size=8, epochs=1, steps_per_epoch=3, shuffle=False,
                            verbose=0)
            gamma, beta, _, _, mean, var = await model.get_weights()
            assert np.isfinite(await model.evaluate(one, y1, verbose=0))
    moved_by = mean / one.mean((0, 1, 2))
    k = int(round(np.log(1 - moved_by[0]) / np.log(MOMENTUM)))
    assert 1 <= k <= 3
    np.testing.assert_allclose(mean, (1 - MOMENTUM ** k) * one.mean((0, 1, 2)), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(var, MOMENTUM ** k + (1 - MOMENTUM ** k) * one.var((0, 1, 2)),
                               rtol=1e-4)


# -- MultiWorkerMirroredStrategy -----------------------------------------------------------------
WORKER = r"""
import asyncio, json, sys
import numpy as np
import distrib as dt
from tests.test_keras_cnn_strategies import bn_model, images

async def main():
    strategy = dt.distribute.MultiWorkerMirroredStrategy()
    layer = dt.keras.layers.experimental.SyncBatchNormalization if sys.argv[1] == "sync" \
        else dt.keras.layers.BatchNormalization
    model = bn_model(strategy, layer)
    x, y = images()
    await model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    bn = model.layers[0]
    values = await dt.function(lambda: [bn.moving_mean.read_value(),
                                        bn.moving_variance.read_value()])()
    print("stats", json.dumps([np.asarray(v).tolist() for v in values]), flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize("sync", [False, True], ids=["plain", "synchronized"])
def test_two_mwms_workers_end_with_the_mirrored_statistics(sync) -> None:
    """Each worker is one replica of the global batch of 8 (worker i: rows 4i..4i+3, as
    replica i under MirroredStrategy): both end with the statistics of the mirrored
    test above."""
    outs = run_workers(["-c", WORKER, "sync" if sync else "plain"], 2, BOUND_S)
    x, _ = images()
    halves = (x[:4], x[4:])
    if sync:
        want_mean, want_var = x.mean((0, 1, 2)), x.var((0, 1, 2))
    else:
        want_mean = np.mean([h.mean((0, 1, 2)) for h in halves], axis=0)
        want_var = np.mean([h.var((0, 1, 2)) for h in halves], axis=0)
    got = [json.loads(next(line for line in out.splitlines() if line.startswith("stats "))[6:])
           for out in outs]
    assert got[0] == got[1]
    np.testing.assert_allclose(got[0][0], moved(want_mean, 0.0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0][1], moved(want_var, 1.0), rtol=1e-5)
