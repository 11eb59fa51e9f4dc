"""``dt.image`` and the ops under it against TF's own op tests
(image_ops_test.py, decode_raw_op_test.py: their inputs and hard-coded
expected values), plain numpy references written out here, and central
differences for the new gradients."""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt

X12 = [0, 5, 13, 54, 135, 226, 37, 8, 234, 90, 255, 1]


def run(*fetches):
    with dt.SyncSession() as sess:
        return sess.run(list(fetches))


def test_per_image_standardization_matches_tfs_test():
    x = np.arange(13 * 9 * 3, dtype=np.float32).reshape(13, 9, 3)
    want = (x - x.mean()) / max(x.std(), 1 / np.sqrt(x.size))   # TF's _NumpyPerImageWhitening
    uniform = np.full((19, 19, 3), 249, np.float32)
    with dt.Graph().as_default():
        y = dt.image.per_image_standardization(x)
        assert y.op.name.startswith("per_image_standardization")
        got, flat = run(y, dt.image.per_image_standardization(uniform))
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert not np.isnan(flat).any() and np.all(flat == 0)


def test_adjust_contrast_and_brightness_match_tfs_tests():
    x = np.array(X12, np.float64).reshape(1, 2, 2, 3) / 255.0
    contrast = np.array([-45.25, -90.75, -92.5, 62.75, 169.25, 333.5, 28.75, -84.75, 349.5,
                         134.75, 409.25, -116.5]).reshape(1, 2, 2, 3) / 255.0
    xb = np.array(X12, np.float32).reshape(2, 2, 3) / 255.0
    bright = np.array([10, 15, 23, 64, 145, 236, 47, 18, 244, 100, 265, 11],
                      np.float32).reshape(2, 2, 3) / 255.0
    with dt.Graph().as_default():
        got_c, got_b = run(dt.image.adjust_contrast(x, 2.0),
                           dt.image.adjust_brightness(xb, 10.0 / 255.0))
    np.testing.assert_allclose(got_c, contrast, rtol=1e-6)
    np.testing.assert_allclose(got_b, bright, rtol=1e-6)


# image_ops_test.py ResizeImageWithCropOrPadTest: (original, shape, expected, shape)
CROP_OR_PAD = [
    ([1, 2, 3, 4, 5, 6, 7, 8], [2, 4, 1], [1, 2, 3, 4, 5, 6, 7, 8], [2, 4, 1]),
    ([1, 2, 3, 4, 5, 6, 7, 8], [2, 4, 1], [0, 1, 2, 3, 4, 0, 0, 5, 6, 7, 8, 0], [2, 6, 1]),
    ([1, 2, 3, 4, 5, 6, 7, 8], [2, 4, 1], [0, 1, 2, 3, 4, 0, 0, 0, 5, 6, 7, 8, 0, 0], [2, 7, 1]),
    ([1, 2, 3, 4, 5, 6, 7, 8], [2, 4, 1], [0] * 4 + list(range(1, 9)) + [0] * 4, [4, 4, 1]),
    ([1, 2, 3, 4, 5, 6, 7, 8], [2, 4, 1], [0] * 4 + list(range(1, 9)) + [0] * 8, [5, 4, 1]),
    ([1, 2, 3, 4, 5, 6, 7, 8], [2, 4, 1], [2, 3, 6, 7], [2, 2, 1]),
    (list(range(1, 13)), [2, 6, 1], [2, 3, 4, 8, 9, 10], [2, 3, 1]),
    ([1, 2, 3, 4, 5, 6, 7, 8], [4, 2, 1], [3, 4, 5, 6], [2, 2, 1]),
    (list(range(1, 17)), [8, 2, 1], list(range(3, 13)), [5, 2, 1]),
    ([1, 2, 3, 4, 5, 6, 7, 8], [2, 4, 1], [0, 0, 2, 3, 6, 7, 0, 0], [4, 2, 1]),
    ([1, 2, 3, 4, 5, 6, 7, 8], [4, 2, 1], [0, 3, 4, 0, 0, 5, 6, 0], [2, 4, 1]),
]


@pytest.mark.parametrize("case", range(len(CROP_OR_PAD)))
def test_resize_with_crop_or_pad_matches_tfs_test(case):
    original, shape, expected, out_shape = CROP_OR_PAD[case]
    x = np.array(original, np.uint8).reshape(shape)
    with dt.Graph().as_default():
        y = dt.image.resize_image_with_crop_or_pad(x, out_shape[0], out_shape[1])
        assert y.shape.as_list() == out_shape
        (got,) = run(y)
    np.testing.assert_array_equal(got, np.array(expected).reshape(out_shape))


def test_random_crop_finds_every_offset_uniformly():
    """TF's test: 1x1 crops of a 5x4 image find each pixel 1/20 of the time."""
    x = np.arange(20, dtype=np.int32).reshape(5, 4, 1)
    with dt.Graph().as_default():
        y = dt.random_crop(x, [1, 1, 1])
        assert y.shape.as_list() == [1, 1, 1]
        with dt.SyncSession() as sess:
            seen = [int(sess.run(y).ravel()[0]) for _ in range(400)]
    counts = np.bincount(seen, minlength=20)
    assert np.all(np.abs(counts - 20) <= 4 * np.sqrt(20))


def test_random_flip_flips_half_the_time_and_flips_exactly():
    x = np.arange(6, dtype=np.float32).reshape(1, 3, 2) * [[[1, 10]]]   # [1, 3, 2]
    x = x.reshape(1, 3, 2)
    with dt.Graph().as_default():
        y = dt.image.random_flip_left_right(x)
        with dt.SyncSession() as sess:
            outs = [sess.run(y) for _ in range(200)]
    flipped = [bool(np.array_equal(o, x[:, ::-1, :])) for o in outs]
    assert all(f or np.array_equal(o, x) for f, o in zip(flipped, outs))
    assert abs(sum(flipped) - 100) <= 4 * np.sqrt(50)


def test_random_brightness_and_contrast_stay_in_their_ranges():
    x = np.random.default_rng(0).random((4, 4, 3)).astype(np.float32)
    with dt.Graph().as_default():
        b = dt.image.random_brightness(x, 0.5)
        c = dt.image.random_contrast(x, 0.2, 1.8)
        with dt.SyncSession() as sess:
            for _ in range(5):
                gb, gc = sess.run([b, c])
                delta = (gb - x).ravel()
                assert np.allclose(delta, delta[0], atol=1e-6) and -0.5 <= delta[0] < 0.5
                mean = x.mean(axis=(0, 1))
                f = ((gc - mean) / (x - mean)).ravel()
                assert np.allclose(f, f[0], rtol=1e-3) and 0.2 <= f[0] < 1.8
    with pytest.raises(dt.errors.InvalidArgumentError):
        dt.image.random_contrast(x, 1.0, 0.5)


def test_decode_raw_matches_tfs_test():
    with dt.Graph().as_default():
        a, b = run(dt.decode_raw(["AaBC"], dt.int16), dt.io.decode_raw("\x01\x02", dt.uint8))
    np.testing.assert_array_equal(a, [[ord("A") + ord("a") * 256, ord("B") + ord("C") * 256]])
    np.testing.assert_array_equal(b, [1, 2])


STRIDED = [   # (begin, end, strides, masks) against numpy's own index
    ([1], [3], [1], {}, np.s_[1:3]),
    ([0, 1], [2, 5], [1, 2], {}, np.s_[0:2, 1:5:2]),
    ([-1], [0], [-1], {}, np.s_[-1:0:-1]),
    ([0, 0], [0, 2], [1, 1], {"begin_mask": 1, "end_mask": 1}, np.s_[:, 0:2]),
    ([1, 0], [2, 0], [1, 1], {"shrink_axis_mask": 1, "end_mask": 2}, np.s_[1, :]),
    ([0, 0, 1], [0, 0, 2], [1, 1, 1], {"ellipsis_mask": 1, "new_axis_mask": 2},
     np.s_[..., None, 1:2]),
]


@pytest.mark.parametrize("case", range(len(STRIDED)))
def test_strided_slice_is_numpys_basic_index(case):
    begin, end, strides, masks, index = STRIDED[case]
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    with dt.Graph().as_default():
        y = dt.strided_slice(x, begin, end, strides, **masks)
        (got,) = run(y)
        assert y.shape.as_list() == list(x[index].shape)
    np.testing.assert_array_equal(got, x[index])


def _numeric_grad(build, x, eps=1e-6):
    """d sum(build(x) * w) / dx by central differences, and by dt.gradients."""
    w = np.random.default_rng(1).random(build(np.asarray(x)).shape)
    with dt.Graph().as_default():
        xt = dt.placeholder(dt.float64, x.shape)
        loss = dt.reduce_sum(build(xt) * w)
        (g,) = dt.gradients(loss, [xt])
        with dt.SyncSession() as sess:
            analytic = sess.run(g, {xt: x})
            numeric = np.zeros_like(x)
            for i in np.ndindex(x.shape):
                d = np.zeros_like(x)
                d[i] = eps
                numeric[i] = (sess.run(loss, {xt: x + d}) - sess.run(loss, {xt: x - d})) / (2 * eps)
    return analytic, numeric


@pytest.mark.parametrize("build", [
    lambda t: dt.strided_slice(t, [1, 0], [3, 4], [1, 2]) if dt.is_tensor(t) else t[1:3, 0:4:2],
    lambda t: dt.slice(t, [1, 1], [2, -1]) if dt.is_tensor(t) else t[1:3, 1:],
    lambda t: dt.pad(t, [[1, 0], [0, 2]]) if dt.is_tensor(t) else np.pad(t, [[1, 0], [0, 2]]),
    lambda t: dt.reverse(t, [1]) if dt.is_tensor(t) else t[:, ::-1],
    lambda t: (dt.image.adjust_contrast(dt.reshape(t, [3, 4, 1]), 1.7) if dt.is_tensor(t)
               else t.reshape(3, 4, 1)),
    lambda t: (dt.where(dt.greater(t, 0.5), t, t * 3.0) if dt.is_tensor(t) else t),
])
def test_gradients_match_central_differences(build):
    x = np.random.default_rng(2).random((3, 4))
    analytic, numeric = _numeric_grad(build, x)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-6)


def test_crop_offset_as_a_tensor_slices_and_differentiates():
    x = np.arange(20, dtype=np.float64).reshape(4, 5)
    with dt.Graph().as_default():
        xt = dt.constant(x)
        y = dt.slice(xt, dt.constant([1, 2]), [2, 2])
        (g,) = dt.gradients(dt.reduce_sum(y), [xt])
        got, grad = run(y, g)
    np.testing.assert_array_equal(got, x[1:3, 2:4])
    want = np.zeros_like(x)
    want[1:3, 2:4] = 1
    np.testing.assert_array_equal(grad, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_standardization_and_contrast_of_one_image_as_tfs(dtype):
    """A dataset map's one-image standardization and contrast once their numba
    loops are compiled (kernels.cpu.image_jit): TF's test numbers, and the
    numpy path's within float rounding, uniform images included."""
    from distrib.ops import image_values
    assert image_values._JIT.prepare(np.dtype(dtype))   # noqa: SLF001 - compile now
    img = np.arange(1, 7, dtype=dtype).reshape(1, 2, 3)
    std = [-1.46385, -0.87831, -0.29277, 0.29277, 0.87831, 1.46385]   # TF's test
    got = image_values.per_image_standardization(img)
    assert got.dtype == dtype and got.shape == img.shape
    np.testing.assert_allclose(got.ravel(), std, atol=1e-5)
    assert np.all(image_values.per_image_standardization(np.full((5, 5, 3), 249, dtype)) == 0)
    x = (np.array(X12, dtype).reshape(2, 2, 3) / 255.0).astype(dtype)
    contrast = np.array([-45.25, -90.75, -92.5, 62.75, 169.25, 333.5, 28.75, -84.75, 349.5,
                         134.75, 409.25, -116.5]).reshape(2, 2, 3) / 255.0   # TF's test
    got = image_values.adjust_contrast(x, 2.0)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, contrast, rtol=1e-5, atol=1e-6)
    rng = np.random.default_rng(3)
    big = rng.uniform(0, 255, (24, 24, 3)).astype(dtype)
    numpy_std = (big - big.mean(dtype=np.float64)) / max(big.std(dtype=np.float64),
                                                          1 / np.sqrt(big.size))
    np.testing.assert_allclose(image_values.per_image_standardization(big), numpy_std,
                               rtol=1e-5, atol=1e-5)
    means = big.reshape(-1, 3).mean(axis=0, dtype=np.float64)
    np.testing.assert_allclose(image_values.adjust_contrast(big, 0.3),
                               (big - means) * 0.3 + means, rtol=1e-5, atol=1e-3)
    # an integer image: converted to float, adjusted, converted back (TF's rule)
    u8 = rng.integers(0, 256, (4, 4, 3)).astype(np.uint8)
    assert image_values.adjust_contrast(u8, 1.0).dtype == np.uint8
