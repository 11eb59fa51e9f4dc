"""Images (issue 40 item 2): the codecs (JPEG through simplejpeg against
Pillow's libjpeg-turbo decode, PNG 8 and 16 bit round trips, decode_image
by format, TF's errors) and dt.image's resizing, colour and dtype functions
with TF's image_ops_test expected values, computed at once in a dataset
function and through ops in a graph."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import distrib as dt
from distrib.errors import InvalidArgumentError


def _in_map(fn, *values):
    """fn run as a dataset function (values computed at once), its one result."""
    ds = dt.data.Dataset.from_tensors(tuple(values) if len(values) > 1 else values[0])
    return next(iter(ds.map(fn)))


def _in_graph(fn, *values):
    g = dt.Graph()
    with g.as_default():
        out = fn(*[dt.constant(v) for v in values])
        sess = dt.SyncSession(graph=g)
        try:
            return sess.run(out)
        finally:
            sess.close()


def _photo(h: int = 48, w: int = 64) -> np.ndarray:
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x + y) * 2, x * 3, 255 - y * 4], -1) + rng.normal(0, 8, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


# -- codecs ------------------------------------------------------------------------
def test_jpeg_decodes_as_libjpeg_turbo_does_and_round_trips():
    img = _photo()
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=90)
    data = buf.getvalue()
    ours = _in_map(dt.io.decode_jpeg, np.array(data, dtype=object))
    accurate = _in_map(lambda c: dt.io.decode_jpeg(c, dct_method="INTEGER_ACCURATE"),
                       np.array(data, dtype=object))
    np.testing.assert_array_equal(accurate, np.asarray(Image.open(io.BytesIO(data))))
    grey = _in_map(lambda c: dt.io.decode_jpeg(c, channels=1), np.array(data, dtype=object))
    assert grey.shape == (48, 64, 1) and grey.dtype == np.uint8
    encoded = _in_map(lambda i: dt.io.encode_jpeg(i, quality=95), img)
    back = np.asarray(Image.open(io.BytesIO(encoded.item())))
    pillows = io.BytesIO()   # Pillow's encoder at TF's settings (quality 95, 4:2:0)
    Image.fromarray(img).save(pillows, format="JPEG", quality=95, subsampling=2)
    theirs = np.asarray(Image.open(pillows))
    assert back.shape == img.shape
    assert np.abs(back.astype(int) - img).mean() <= 1.1 * np.abs(theirs.astype(int) - img).mean()
    graph = _in_graph(lambda c: dt.io.decode_jpeg(c, channels=3), np.array(data, dtype=object))
    np.testing.assert_array_equal(graph, ours)


@pytest.mark.parametrize("dtype,channels", [(np.uint8, 3), (np.uint8, 4), (np.uint16, 1)])
def test_png_round_trips_exactly(dtype, channels):
    rng = np.random.default_rng(1)
    img = rng.integers(0, np.iinfo(dtype).max, (5, 7, channels), endpoint=True).astype(dtype)
    data = _in_map(dt.io.encode_png, img)
    back = _in_map(lambda c: dt.io.decode_png(c, dtype=dt.as_dtype(dtype)), data)
    np.testing.assert_array_equal(back, img)
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(data.item()))).reshape(img.shape),
                                  img)
    if dtype == np.uint8:   # TF: 8-bit data read as uint16 is scaled by 257
        wide = _in_map(lambda c: dt.io.decode_png(c, dtype=dt.uint16), data)
        np.testing.assert_array_equal(wide, img.astype(np.uint16) * 257)


def test_decode_image_by_format_and_tfs_errors():
    img = _photo(8, 8)
    png = _in_map(dt.io.encode_png, img)
    np.testing.assert_array_equal(_in_map(dt.io.decode_image, png), img)
    as_float = _in_map(lambda c: dt.io.decode_image(c, dtype=dt.float32), png)
    np.testing.assert_allclose(as_float, img / 255.0, rtol=1e-6)
    frames = [Image.fromarray(np.full((4, 4, 3), v, np.uint8)) for v in (0, 255)]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    gif = _in_map(dt.io.decode_image, np.array(buf.getvalue(), dtype=object))
    assert gif.shape == (2, 4, 4, 3)
    with pytest.raises(InvalidArgumentError, match="Unknown image file format"):
        _in_map(dt.io.decode_image, np.array(b"not an image", dtype=object))
    with pytest.raises(InvalidArgumentError, match="Invalid JPEG data"):
        _in_map(dt.io.decode_jpeg, png)


# -- resizing: TF's image_ops_test expected values ------------------------------------
UP = np.array([64, 32, 32, 64, 50, 100], np.float32).reshape(1, 3, 2, 1)
V2_UP = {   # ResizeImagesV2Test.testResizeUp
    "bilinear": [64.0, 56.0, 40.0, 32.0, 56.0, 52.0, 44.0, 40.0, 40.0, 44.0, 52.0, 56.0,
                 36.5, 45.625, 63.875, 73.0, 45.5, 56.875, 79.625, 91.0, 50.0, 62.5, 87.5, 100.0],
    "nearest": [64.0, 64.0, 32.0, 32.0, 64.0, 64.0, 32.0, 32.0, 32.0, 32.0, 64.0, 64.0,
                32.0, 32.0, 64.0, 64.0, 50.0, 50.0, 100.0, 100.0, 50.0, 50.0, 100.0, 100.0],
    "area": [64.0, 64.0, 32.0, 32.0, 64.0, 64.0, 32.0, 32.0, 32.0, 32.0, 64.0, 64.0,
             32.0, 32.0, 64.0, 64.0, 50.0, 50.0, 100.0, 100.0, 50.0, 50.0, 100.0, 100.0],
}
V1_UP_BILINEAR = [64.0, 48.0, 32.0, 32.0, 48.0, 48.0, 48.0, 48.0, 32.0, 48.0, 64.0, 64.0,
                  41.0, 61.5, 82.0, 82.0, 50.0, 75.0, 100.0, 100.0, 50.0, 75.0, 100.0, 100.0]
CORNERS = np.array([6, 3, 3, 6, 6, 9], np.float32).reshape(1, 3, 2, 1)
V1_ALIGN = {   # ResizeImagesTest.testResizeUpAlignCornersTrue (5 x 4)
    0: [6.0, 5.0, 4.0, 3.0, 4.5, 4.5, 4.5, 4.5, 3.0, 4.0, 5.0, 6.0, 4.5, 5.5, 6.5, 7.5,
        6.0, 7.0, 8.0, 9.0],
    1: [6.0, 6.0, 3.0, 3.0, 3.0, 3.0, 6.0, 6.0, 3.0, 3.0, 6.0, 6.0, 6.0, 6.0, 9.0, 9.0,
        6.0, 6.0, 9.0, 9.0],
    3: [6.0, 6.0, 6.0, 3.0, 6.0, 6.0, 6.0, 3.0, 3.0, 3.0, 3.0, 6.0, 3.0, 3.0, 3.0, 6.0,
        6.0, 6.0, 6.0, 9.0],
}


@pytest.mark.parametrize("method", ["bilinear", "nearest", "area"])
def test_resize_v2_has_tfs_numbers_at_once_and_in_a_graph(method):
    want = np.array(V2_UP[method], np.float32).reshape(1, 6, 4, 1)
    np.testing.assert_allclose(_in_map(lambda x: dt.image.resize(x, [6, 4], method), UP),
                               want, atol=1e-5)
    np.testing.assert_allclose(_in_graph(lambda x: dt.image.resize(x, [6, 4], method), UP),
                               want, atol=1e-5)
    three_d = _in_map(lambda x: dt.image.resize(x, [6, 4], method), UP[0])
    np.testing.assert_allclose(three_d, want[0], atol=1e-5)


def test_resize_images_v1_legacy_corners_and_align_corners():
    np.testing.assert_allclose(_in_graph(lambda x: dt.image.resize_images(x, [6, 4]), UP),
                               np.reshape(V1_UP_BILINEAR, (1, 6, 4, 1)), atol=1e-5)
    for method, want in V1_ALIGN.items():
        got = _in_map(lambda x, m=method: dt.image.resize_images(x, [5, 4], m, align_corners=True),
                      CORNERS)
        np.testing.assert_allclose(got, np.reshape(want, (1, 5, 4, 1)), atol=1e-5)
    same = _in_map(lambda x: dt.image.resize_images(x, [3, 2]), CORNERS)
    np.testing.assert_array_equal(same, CORNERS)   # TF1 returns the image itself
    nn = _in_map(lambda x: dt.image.resize(x, [6, 4], "nearest"), UP.astype(np.uint8))
    assert nn.dtype == np.uint8


@pytest.mark.parametrize("method,size", [("bilinear", [6, 4]), ("nearest", [5, 3]),
                                         ("bilinear", [2, 1])])
def test_resize_gradients_match_finite_differences(method, size):
    from kernels.cpu.image_resize import resize_value
    g = dt.Graph()
    with g.as_default():
        x = dt.constant(UP)
        y = dt.image.resize(x, size, method)
        (dx,) = dt.gradients(dt.reduce_sum(y * y), [x])
        sess = dt.SyncSession(graph=g)
        try:
            got = sess.run(dx)
        finally:
            sess.close()

    def loss(v: np.ndarray) -> float:
        out = resize_value(v.astype(np.float32), size, method, False, True)
        return float(np.sum(out.astype(np.float64) ** 2))
    num = np.zeros(UP.size)
    for i in range(UP.size):
        d = np.zeros(UP.size)
        d[i] = 0.25   # nearest is piecewise linear in x: any step is exact
        d = d.reshape(UP.shape)
        num[i] = (loss(UP + d) - loss(UP - d)) / 0.5
    np.testing.assert_allclose(got.ravel(), num, rtol=1e-4, atol=1e-3)


# -- colour and dtype ------------------------------------------------------------------
X = np.array([0, 5, 13, 54, 135, 226, 37, 8, 234, 90, 255, 1], np.uint8).reshape(2, 2, 3)


@pytest.mark.parametrize("fn,amount,want", [
    ("adjust_hue", 0.25, [13, 0, 11, 226, 54, 221, 234, 8, 92, 1, 217, 255]),
    ("adjust_hue", -0.25, [0, 13, 1, 54, 226, 59, 8, 234, 150, 255, 39, 1]),
    ("adjust_saturation", 0.5, [6, 9, 13, 140, 180, 226, 135, 121, 234, 172, 255, 128]),
    ("adjust_saturation", 2.0, [0, 5, 13, 0, 106, 226, 30, 0, 234, 89, 255, 0]),
])
def test_hue_and_saturation_have_tfs_numbers(fn, amount, want):
    op = getattr(dt.image, fn)
    want = np.array(want, np.uint8).reshape(2, 2, 3)
    np.testing.assert_array_equal(_in_map(lambda x: op(x, amount), X), want)
    np.testing.assert_array_equal(_in_graph(lambda x: op(x, amount), X), want)


def test_convert_image_dtype_as_tfs():
    cases = [([0, 255], np.uint8, dt.float32, [0.0, 1.0]),
             ([0, 255], np.uint8, dt.int16, [0, 255 * 128]),
             ([0, 32767], np.int16, dt.uint8, [0, 255]),
             ([0.0, 1.0], np.float32, dt.uint8, [0, 255]),
             ([0.0, 0.5, 1.0], np.float32, dt.float64, [0.0, 0.5, 1.0])]
    for values, src, dst, want in cases:
        got = _in_map(lambda x, d=dst: dt.image.convert_image_dtype(x, d), np.array(values, src))
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert got.dtype == dst.as_numpy_dtype
    sat = _in_map(lambda x: dt.image.convert_image_dtype(x, dt.uint8, saturate=True),
                  np.float32([-0.5, 2.0]))
    np.testing.assert_array_equal(sat, [0, 255])
    np.testing.assert_allclose(_in_graph(lambda x: dt.image.convert_image_dtype(x, dt.float32),
                                         np.uint8([0, 51, 255])), [0.0, 0.2, 1.0], rtol=1e-6)


def test_central_crop_and_standardization_as_tfs():
    x = np.tile(np.arange(1, 9, dtype=np.int32), (4, 1)).reshape(4, 8, 1)   # TF's testCropping
    want = np.array([[3, 4, 5, 6], [3, 4, 5, 6]]).reshape(2, 4, 1)
    np.testing.assert_array_equal(_in_map(lambda v: dt.image.central_crop(v, 0.5), x), want)
    np.testing.assert_array_equal(_in_graph(lambda v: dt.image.central_crop(v, 0.5), x), want)
    img = np.arange(1, 7, dtype=np.float32).reshape(1, 2, 3)
    std = [-1.46385, -0.87831, -0.29277, 0.29277, 0.87831, 1.46385]   # TF's test
    np.testing.assert_allclose(_in_map(dt.image.per_image_standardization, img).ravel(), std,
                               atol=1e-5)


def test_random_augmentations_at_once_keep_shapes_and_ranges():
    img = _photo(32, 32)
    ds = dt.data.Dataset.from_tensors(img).repeat(8).map(lambda x: dt.image.random_hue(
        dt.image.random_saturation(dt.image.random_flip_up_down(dt.image.random_crop(
            x, [24, 24, 3])), 0.5, 1.5), 0.1))
    outs = list(ds)
    assert all(o.shape == (24, 24, 3) and o.dtype == np.uint8 for o in outs)
    assert len({o.tobytes() for o in outs}) > 1   # random: not every element the same
    with pytest.raises(InvalidArgumentError, match="max_delta must be <= 0.5"):
        dt.image.random_hue(img, 0.6)


_EAGER = """
import numpy as np
import distrib as dt
dt.enable_eager_execution()
from PIL import Image
import io
img = (np.arange(16 * 16 * 3) % 200).astype(np.uint8).reshape(16, 16, 3)
buf = io.BytesIO()
Image.fromarray(img).save(buf, format="PNG")
x = dt.io.decode_png(buf.getvalue())
assert type(x).__name__ == "EagerTensor" and (x.numpy() == img).all()
y = dt.image.resize(dt.image.convert_image_dtype(x, dt.float32), [8, 8], "area")
assert y.numpy().shape == (8, 8, 3)
ds = dt.data.Dataset.from_tensors(np.array(buf.getvalue(), dtype=object)).map(
    lambda c: dt.cast(dt.io.decode_png(c), dt.float32) / 255.0)   # general ops: eager
(out,) = list(ds)
assert np.allclose(out, img / 255.0)
print("OK")
"""


def test_the_codecs_and_resize_run_eagerly_and_general_ops_in_a_map_with_eager_on():
    import subprocess
    import sys

    from tests.helpers import ROOT, child_env
    out = subprocess.run([sys.executable, "-c", _EAGER], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=child_env())
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]


# -- from a review of the codecs -------------------------------------------------------
def test_jpeg_decodes_with_tfs_default_fast_dct_and_refuses_four_channels():
    """TF decodes a JPEG with libjpeg's fast integer DCT unless dct_method is
    INTEGER_ACCURATE (decode_image_op.cc: "" and INTEGER_FAST are JDCT_IFAST);
    the default decoded with the accurate one. channels=4 gave 3 channels
    silently where TF refuses ("JPEG does not support 4 channels")."""
    buf = io.BytesIO()
    Image.fromarray(_photo()).save(buf, format="JPEG", quality=90)
    data = np.array(buf.getvalue(), dtype=object)
    default = _in_map(dt.io.decode_jpeg, data)
    fast = _in_map(lambda c: dt.io.decode_jpeg(c, dct_method="INTEGER_FAST"), data)
    accurate = _in_map(lambda c: dt.io.decode_jpeg(c, dct_method="INTEGER_ACCURATE"), data)
    np.testing.assert_array_equal(default, fast)
    assert (default != accurate).any()
    assert np.abs(default.astype(int) - accurate).mean() < 2.0   # a close approximation
    np.testing.assert_array_equal(_in_graph(dt.io.decode_jpeg, data), default)
    with pytest.raises(InvalidArgumentError, match="JPEG does not support 4 channels"):
        _in_map(lambda c: dt.io.decode_jpeg(c, channels=4), data)
    with pytest.raises(InvalidArgumentError, match="JPEG does not support 4 channels"):
        _in_map(lambda c: dt.io.decode_image(c, channels=4), data)
    with pytest.raises(InvalidArgumentError, match="dct_method must be one of"):
        _in_map(lambda c: dt.io.decode_jpeg(c, dct_method="INTEGER_SLOW"), data)


def test_decode_image_scales_to_uint16_and_float_as_tfs_kernel():
    """decode_image(dtype=uint16) of a JPEG, GIF or BMP gave its uint8 pixels
    unscaled (and typed uint8); TF's kernel multiplies 8-bit pixels by
    floor(65536 / 256) = 256, a PNG's (widened by libpng) by 257; float32 is
    pixels / 255 (a 16-bit PNG's / 65535)."""
    img = _photo(6, 5)
    jpeg = np.array(_in_map(lambda i: dt.io.encode_jpeg(i, quality=95), img).item(), dtype=object)
    bmp_buf = io.BytesIO()
    Image.fromarray(img).save(bmp_buf, format="BMP")
    bmp = np.array(bmp_buf.getvalue(), dtype=object)
    for data in (jpeg, bmp):
        pixels = _in_map(dt.io.decode_image, data)
        wide = _in_map(lambda c: dt.io.decode_image(c, dtype=dt.uint16), data)
        assert wide.dtype == np.uint16
        np.testing.assert_array_equal(wide, pixels.astype(np.uint16) * 256)
        as_float = _in_map(lambda c: dt.io.decode_image(c, dtype=dt.float32), data)
        np.testing.assert_allclose(as_float, pixels / 255.0, rtol=1e-6)
        np.testing.assert_array_equal(
            _in_graph(lambda c: dt.io.decode_image(c, dtype=dt.uint16, expand_animations=False),
                      data), wide)
    np.testing.assert_array_equal(_in_map(dt.io.decode_image, bmp), img)
    deep = (np.arange(12, dtype=np.uint16).reshape(3, 4, 1) * 5000 + 7)
    png16 = _in_map(dt.io.encode_png, deep)
    np.testing.assert_allclose(_in_map(lambda c: dt.io.decode_image(c, dtype=dt.float32), png16),
                               deep / 65535.0, rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match="for BMP"):
        _in_map(lambda c: dt.io.decode_image(c, channels=1), bmp)


def test_brightness_and_contrast_of_uint8_images_in_a_graph_as_tfs():
    """In a graph adjust_brightness / adjust_contrast refused integer images
    ("cast to float32 first"); TF converts them to float32 and back, saturating
    (image_ops_test: testPositiveDeltaUint8, testDoubleContrastUint8)."""
    x = np.array([0, 5, 13, 54, 135, 226, 37, 8, 234, 90, 255, 1], np.uint8)
    brighter = np.array([10, 15, 23, 64, 145, 236, 47, 18, 244, 100, 255, 11], np.uint8)
    contrast = np.array([0, 0, 0, 62, 169, 255, 28, 0, 255, 135, 255, 0], np.uint8)
    image = x.reshape(2, 2, 3)
    for run in (_in_graph, _in_map):
        got = run(lambda i: dt.image.adjust_brightness(i, 10.0 / 255.0), image)
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, brighter.reshape(2, 2, 3))
        got = run(lambda i: dt.image.adjust_contrast(i, 2.0), x.reshape(1, 2, 2, 3))
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, contrast.reshape(1, 2, 2, 3))
    shifted = _in_graph(lambda i: dt.image.random_brightness(i, 0.2, seed=3), image)
    assert shifted.dtype == np.uint8 and shifted.shape == (2, 2, 3)
