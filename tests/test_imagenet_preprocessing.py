"""ResNet's ImageNet input pipeline (issue 40): TF's official
``imagenet_preprocessing.py`` ported as written (examples/imagenet/) on
TFRecord shards of Examples as ``build_imagenet_data.py`` writes them, and
the ops it needed: ``extract_jpeg_shape``, ``sample_distorted_bounding_box``
(the properties TF's SelectDistortedCropBoxTest checks: the crop inside the
image, covering ``min_object_covered`` of the box, aspect ratio and area in
range; the whole image after ``max_attempts``), ``decode_and_crop_jpeg``
(equal to decode then crop, as TF's DecodeAndCropJpeg tests check; a window
outside the image TF's error) and ``broadcast_to`` (values and gradient
against numpy).

The port is a TF2 program (eager on), so it runs in a child process; the
ops run here in graphs and in dataset functions.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import distrib as dt
from distrib.errors import InvalidArgumentError
from examples.imagenet.make_data import encode_jpeg
from tests.helpers import ROOT, child_env


def _noise(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3)).astype(np.uint8)


def _in_graph(build, *feeds):
    g = dt.Graph()
    with g.as_default():
        holders = [dt.placeholder(dt.string, []) for _ in feeds]
        out = build(*holders)
        sess = dt.SyncSession(graph=g)
        try:
            return sess.run(out, dict(zip(holders, feeds)))
        finally:
            sess.close()


def _in_map(fn, value):
    ds = dt.data.Dataset.from_tensors(value)
    return next(iter(ds.map(fn)))


# -- extract_jpeg_shape ---------------------------------------------------------------------
def test_extract_jpeg_shape_reads_height_width_and_channels_from_the_header():
    colour = encode_jpeg(_noise(37, 53))
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(_noise(20, 30)[..., 0]).save(buf, format="JPEG")
    grey = buf.getvalue()
    got = _in_graph(lambda a, b: [dt.image.extract_jpeg_shape(a),
                                  dt.io.extract_jpeg_shape(b, output_type=dt.int64)],
                    colour, grey)
    assert got[0].tolist() == [37, 53, 3] and got[0].dtype == np.int32
    assert got[1].tolist() == [20, 30, 1] and got[1].dtype == np.int64
    in_map = _in_map(dt.image.extract_jpeg_shape, np.array(colour, dtype=object))
    assert np.asarray(in_map).tolist() == [37, 53, 3]
    with pytest.raises(InvalidArgumentError, match="Invalid JPEG data"):
        _in_map(dt.image.extract_jpeg_shape, np.array(b"not a jpeg", dtype=object))


# -- decode_and_crop_jpeg -------------------------------------------------------------------
@pytest.mark.parametrize("window", [[0, 0, 40, 60], [3, 7, 20, 31], [39, 59, 1, 1]])
def test_decode_and_crop_equals_decode_then_crop(window):
    jpeg = encode_jpeg(_noise(40, 60, seed=1))
    y, x, h, w = window
    crop, full = _in_graph(lambda c: [dt.image.decode_and_crop_jpeg(c, window, channels=3),
                                      dt.image.decode_jpeg(c, channels=3)], jpeg)
    np.testing.assert_array_equal(crop, full[y:y + h, x:x + w])
    in_map = _in_map(lambda c: dt.image.decode_and_crop_jpeg(c, window), np.array(jpeg, object))
    np.testing.assert_array_equal(in_map, full[y:y + h, x:x + w])


@pytest.mark.parametrize("window", [[0, 0, 41, 60], [-1, 0, 10, 10], [30, 50, 11, 5],
                                    [0, 0, 0, 5], [0, 0, -3, 5]])
def test_a_crop_window_outside_the_image_is_tfs_invalid_argument(window):
    jpeg = encode_jpeg(_noise(40, 60))
    with pytest.raises(InvalidArgumentError, match="Invalid JPEG data or crop window"):
        _in_graph(lambda c: dt.image.decode_and_crop_jpeg(c, window), jpeg)
    with pytest.raises(InvalidArgumentError, match="Invalid JPEG data or crop window"):
        _in_map(lambda c: dt.image.decode_and_crop_jpeg(c, window), np.array(jpeg, object))


def test_a_crop_window_that_is_not_four_ints_fails_when_built():
    with dt.Graph().as_default():
        with pytest.raises(InvalidArgumentError, match="crop_window"):
            dt.image.decode_and_crop_jpeg(dt.placeholder(dt.string, []), [0, 0, 5])


# -- sample_distorted_bounding_box ----------------------------------------------------------
def _check_crops(begins, sizes, boxes_out, height, width, box, min_covered, ratio_range,
                 area_range):
    """TF's SelectDistortedCropBoxTest checks, over many draws."""
    y0, x0 = int(box[0] * height), int(box[1] * width)
    y1, x1 = int(box[2] * height), int(box[3] * width)
    box_area = (y1 - y0) * (x1 - x0)
    for b, s, out in zip(begins, sizes, boxes_out):
        (by, bx, bc), (sh, sw, sc) = b, s
        assert bc == 0 and sc == -1
        assert 0 <= by and 0 <= bx and by + sh <= height and bx + sw <= width   # inside
        inter = max(0, min(by + sh, y1) - max(by, y0)) * max(0, min(bx + sw, x1) - max(bx, x0))
        assert inter / box_area >= min_covered - 1e-6                             # covers
        area = sh * sw / (height * width)
        assert area_range[0] - 0.02 <= area <= area_range[1] + 1e-6               # area
        # width = round(ratio * height): the ratio within a rounding step of the range
        assert ratio_range[0] - 1.0 / sh <= sw / sh <= ratio_range[1] + 1.0 / sh  # ratio
        np.testing.assert_allclose(out.reshape(4), [by / height, bx / width,
                                                    (by + sh) / height, (bx + sw) / width],
                                   rtol=1e-6)


@pytest.mark.parametrize("min_covered", [0.1, 0.5, 0.9])
def test_sampled_crops_lie_inside_cover_the_box_and_keep_ratio_and_area(min_covered):
    height, width, box = 40, 50, [0.25, 0.2, 0.75, 0.8]
    ratio, area = (0.75, 1.33), (0.05, 1.0)
    g = dt.Graph()
    with g.as_default():
        outs = dt.image.sample_distorted_bounding_box(
            dt.constant([height, width, 1]), bounding_boxes=dt.constant([[box]], dt.float32),
            min_object_covered=min_covered, aspect_ratio_range=ratio, area_range=area)
        with dt.SyncSession(graph=g) as sess:
            draws = [sess.run(list(outs)) for _ in range(100)]
    begins, sizes, boxes = zip(*draws)
    _check_crops(begins, sizes, boxes, height, width, box, min_covered, ratio, area)
    assert len({tuple(b) + tuple(s) for b, s in zip(begins, sizes)}) > 20   # random, varied
    # the same in a dataset function, drawing from the element's generator
    ds = dt.data.Dataset.from_tensors(np.int32(0)).repeat(100).map(
        lambda _: dt.image.sample_distorted_bounding_box(
            np.array([height, width, 1], np.int32), np.array([[box]], np.float32),
            min_object_covered=min_covered, aspect_ratio_range=ratio, area_range=area))
    begins, sizes, boxes = zip(*list(ds))
    _check_crops(begins, sizes, boxes, height, width, box, min_covered, ratio, area)


def test_impossible_constraints_give_the_whole_image_after_max_attempts():
    """An aspect ratio of 3-4 cannot hold 90% of a square image: every try fails,
    and the crop is the image itself (TF's fallback)."""
    ds = dt.data.Dataset.from_tensors(np.int32(0)).repeat(5).map(
        lambda _: dt.image.sample_distorted_bounding_box(
            np.array([60, 60, 3], np.int32), np.zeros([1, 0, 4], np.float32),
            aspect_ratio_range=[3.0, 4.0], area_range=[0.9, 1.0], max_attempts=7,
            use_image_if_no_bounding_boxes=True))
    for begin, size, box in ds:
        assert begin.tolist() == [0, 0, 0] and size.tolist() == [60, 60, -1]
        assert box.reshape(4).tolist() == [0.0, 0.0, 1.0, 1.0]


def test_no_boxes_without_use_image_and_bad_ranges_are_tfs_errors():
    size, none = np.array([10, 10, 3], np.int32), np.zeros([1, 0, 4], np.float32)
    with pytest.raises(InvalidArgumentError, match="use_image_if_no_bounding_boxes"):
        _in_map(lambda _: dt.image.sample_distorted_bounding_box(size, none), np.int32(0))
    with pytest.raises(InvalidArgumentError, match="Area range must be less"):
        dt.image.sample_distorted_bounding_box(size, none, area_range=[0.5, 1.5])
    with pytest.raises(InvalidArgumentError, match="coordinates must be in"):
        _in_map(lambda _: dt.image.sample_distorted_bounding_box(
            size, np.array([[[0.0, 0.0, 1.5, 1.0]]], np.float32)), np.int32(0))
    with dt.Graph().as_default(), pytest.raises(InvalidArgumentError, match="image_size"):
        dt.image.sample_distorted_bounding_box(dt.constant([10, 10]), dt.constant(none))


def test_a_seeded_sampler_in_a_map_crops_the_same_each_run_and_differently_each_epoch():
    def crops():
        with dt.Graph().as_default():   # the map's seed derives from the graph's
            dt.set_random_seed(7)
            ds = dt.data.Dataset.range(6).map(
                lambda _: dt.image.sample_distorted_bounding_box(
                    np.array([100, 120, 3], np.int32),
                    np.array([[[0.1, 0.1, 0.9, 0.9]]], np.float32), min_object_covered=0.1)[:2]
            ).repeat(2)
            return [tuple(np.concatenate([b, s]).tolist()) for b, s in ds]
    first, again = crops(), crops()
    assert first == again
    assert first[:6] != first[6:]


class _Top:
    """A generator that always draws the top of the range (TF's Uniform(n) -> n - 1)."""

    def random(self):
        return 1.0 - 2.0 ** -30

    def integers(self, low, high):
        return high - 1


def test_the_tallest_crop_a_width_allows_is_computed_in_double_as_tfs():
    """TF's GenerateRandomCrop limits the height to int((width + 0.5 - 1e-7) / ratio)
    in double: 14 rows for a width of 124 at ratio 8.3 (14.99999...). In float32 (numpy
    2 keeps a float32 ratio's quotient float32) it is 15.0, a row TF never gives.
    The expected crop is TF's kernel's, worked by hand: heights 12..14, the top one,
    width lrint(14 * 8.3) = 116, offsets at the top of their ranges."""
    from kernels.cpu.image_boxes import _random_crop
    assert _random_crop(124, 100000, 0.0001, 1.0, np.float32(8.3), _Top()) == \
        (124 - 116 - 1, 100000 - 14 - 1, 116, 14)


def _sample_both_ways(size, box):
    g = dt.Graph()
    with g.as_default(), dt.SyncSession(graph=g) as sess:
        graph = sess.run(list(dt.image.sample_distorted_bounding_box(
            dt.constant(size), dt.constant(box))))
    in_map = _in_map(lambda _: dt.image.sample_distorted_bounding_box(size, box), np.int32(0))
    return graph, [np.asarray(v) for v in in_map]


def test_image_size_is_checked_and_its_type_kept_as_tfs_kernel_does():
    box = np.array([[[0.1, 0.1, 0.9, 0.9]]], np.float32)
    for outs in _sample_both_ways(np.array([50, 60, 3], np.uint8), box):
        assert outs[0].dtype == outs[1].dtype == np.uint8
        assert outs[1][2] == 255                      # T(-1) for uint8, all channels
        assert outs[0][0] + outs[1][0] <= 50 and outs[0][1] + outs[1][1] <= 60
    for outs in _sample_both_ways(np.array([0, 60, 3], np.int32), box):
        # no rows: every try fails, the whole (empty) image, its box 0/0 (TF's NaN)
        assert outs[0].tolist() == [0, 0, 0] and outs[1].tolist() == [0, 60, -1]
        assert np.isnan(outs[2][0, 0, [0, 2]]).all() and outs[2][0, 0, [1, 3]].tolist() == \
            [0.0, 1.0]
    with pytest.raises(InvalidArgumentError, match="image height cannot be >= int32 max"):
        _sample_both_ways(np.array([-5, 60, 3], np.int32), box)
    with pytest.raises(InvalidArgumentError, match="image width cannot be >= int32 max"):
        _in_map(lambda _: dt.image.sample_distorted_bounding_box(
            np.array([5, 2**31, 3], np.int64), box), np.int32(0))


def test_compat_v1_image_resize_is_tf1s_resize_images_and_sampler_takes_seed2():
    assert dt.compat.v1.image.resize.__name__ == "resize" and dt.compat.v1.image.decode_jpeg \
        is dt.image.decode_jpeg
    x = np.arange(2 * 3 * 1, dtype=np.float32).reshape(2, 3, 1)
    got = _in_map(lambda v: dt.compat.v1.image.resize(v, [4, 6]), x)
    want = _in_map(lambda v: dt.image.resize_images(v, [4, 6]), x)
    np.testing.assert_array_equal(np.asarray(got), want)
    # TF1 legacy bilinear (no half-pixel centres): row 1 of 4 reads input row 0.5
    np.testing.assert_allclose(np.asarray(got)[1, :, 0], [1.5, 2.0, 2.5, 3.0, 3.5, 3.5])
    with dt.Graph().as_default():
        outs = dt.compat.v1.image.sample_distorted_bounding_box(
            dt.constant([10, 10, 3]), dt.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=1, seed2=2)
        assert outs[0].op.type == "SampleDistortedBoundingBoxV2" and outs[0].op.get_attr("seed")


# -- broadcast_to ---------------------------------------------------------------------------
def test_broadcast_to_matches_numpy_and_its_gradient_sums_back():
    g = dt.Graph()
    with g.as_default():
        x = dt.constant([[1.0], [2.0]])
        y = dt.broadcast_to(x, [3, 2, 4])
        dx = dt.gradients(dt.reduce_sum(y * dt.constant(np.arange(24.0, dtype=np.float32)
                                                          .reshape(3, 2, 4))), x)[0]
        with dt.SyncSession(graph=g) as sess:
            got_y, got_dx = sess.run([y, dx])
    np.testing.assert_array_equal(got_y, np.broadcast_to([[1.0], [2.0]], (3, 2, 4)))
    np.testing.assert_array_equal(got_dx, np.arange(24.0).reshape(3, 2, 4).sum((0, 2))[:, None])
    assert y.shape.as_list() == [3, 2, 4]
    with pytest.raises(InvalidArgumentError, match="Unable to broadcast"):
        _in_map(lambda v: dt.broadcast_to(v, [3, 4]), np.ones([2, 1], np.float32))
    # TF's shape function: known dims checked when built, a Shape's known dims kept
    with dt.Graph().as_default():
        with pytest.raises(InvalidArgumentError, match="Unable to broadcast"):
            dt.broadcast_to(dt.constant([1.0, 2.0]), [3, 4])
        with pytest.raises(InvalidArgumentError, match="Cannot broadcast"):
            dt.broadcast_to(dt.constant([[1.0, 2.0]]), [2])
        images = dt.placeholder(dt.float32, [None, None, 3])
        assert dt.broadcast_to([1.0, 2.0, 3.0], dt.shape(images)).shape.as_list() == \
            [None, None, 3]
        assert dt.broadcast_to(dt.placeholder(dt.float32, [2, 1]), [-1, 4]).shape.as_list() \
            == [2, 4]
    # in a dataset function, at once; Python floats are float32, as TF converts them
    means = _in_map(lambda v: dt.broadcast_to([1.0, 2.0, 3.0], dt.shape(v)),
                    np.zeros([2, 2, 3], np.uint8))
    assert means.dtype == np.float32 and means.shape == (2, 2, 3) and means[1, 1].tolist() == \
        [1.0, 2.0, 3.0]


# -- the ported program ---------------------------------------------------------------------
_CHILD = r"""
import asyncio, json, sys
import numpy as np
sys.path.insert(0, ".")
from examples.imagenet import imagenet_preprocessing as ip   # turns eager on, as TF2
from examples.imagenet.make_data import write_shards
import distrib as dt

out = {}
paths, records = write_shards(sys.argv[1], "train", num_files=3, per_file=6, seed=3)
labels = [r.label - 1 for r in records]

# parse_record for training, two epochs of the files in order
ds = dt.data.TFRecordDataset(paths).map(
    lambda r: ip.parse_record(r, True, dt.float32)).repeat(2)
images, got_labels = zip(*[(np.asarray(x), np.asarray(y)) for x, y in ds])
n = len(records)
out["train_shapes"] = sorted({(x.shape, str(x.dtype)) for x in images}, key=str)
out["train_labels"] = [float(y[0]) for y in got_labels]
out["epochs_differ"] = sum(not np.array_equal(images[i], images[i + n]) for i in range(n))
out["train_range"] = [float(min(x.min() for x in images)), float(max(x.max() for x in images))]

# the eval path against numpy: decode, aspect-preserving resize (TF1 bilinear,
# legacy corners) to a shorter side of 256, central 224 crop, channel means off
def reference(jpeg):
    img = np.asarray(dt.io.decode_jpeg(jpeg, channels=3)).astype(np.float64)
    h, w = img.shape[:2]
    scale = np.float32(256) / np.float32(min(h, w))
    nh, nw = int(np.float32(h) * scale), int(np.float32(w) * scale)
    def axis(n_in, n_out):
        pos = np.arange(n_out, dtype=np.float32) * np.float32(n_in / n_out)
        lo = np.floor(pos).astype(int)
        return lo, np.minimum(lo + 1, n_in - 1), (pos - lo).astype(np.float64)
    y0, y1, fy = axis(h, nh)
    x0, x1, fx = axis(w, nw)
    top = img[y0][:, x0] + (img[y0][:, x1] - img[y0][:, x0]) * fx[None, :, None]
    bottom = img[y1][:, x0] + (img[y1][:, x1] - img[y1][:, x0]) * fx[None, :, None]
    resized = top + (bottom - top) * fy[:, None, None]
    t, l = (nh - 224) // 2, (nw - 224) // 2
    return resized[t:t + 224, l:l + 224] - np.array([123.68, 116.78, 103.94])

ds = dt.data.TFRecordDataset(paths).map(lambda r: ip.parse_record(r, False, dt.float32))
evals = [np.asarray(x) for x, _ in ds]
refs = [reference(r.jpeg) for r in records]
out["eval_max_error"] = max(float(np.abs(e - r).max()) for e, r in zip(evals, refs))
out["eval_shapes"] = sorted({(x.shape, str(x.dtype)) for x in evals}, key=str)

# input_fn as the official trainer calls it: eval batches, every record once
batches = list(ip.input_fn(False, sys.argv[1], 4, filenames=paths))
out["eval_batches"] = [list(np.asarray(x).shape) for x, _ in batches]
flat = [np.asarray(x)[i] for x, _ in batches for i in range(len(np.asarray(x)))]
out["eval_matched"] = sum(min(float(np.abs(f - r).max()) for r in refs) < 0.05 for f in flat)

# input_fn's other arguments: a private thread pool, slack, a cache, the batch's
# remainder dropped, one of two input pipelines (every other file), Keras' format
half = ip.input_fn(False, sys.argv[1], 4, filenames=paths, datasets_num_private_threads=2,
                   tf_data_experimental_slack=True, drop_remainder=True,
                   parse_record_fn=ip.get_parse_record_fn(use_keras_image_data_format=True),
                   input_context=dt.distribute.InputContext(2, 1, 2))
out["shard_batches"] = [list(np.asarray(x).shape) for x, _ in half]
cached = ip.input_fn(True, sys.argv[1], 4, filenames=paths, training_dataset_cache=True)
out["cached_batch"] = list(np.asarray(next(iter(cached))[0]).shape)

# training batches, and a small Keras model learning from them
train = ip.input_fn(True, sys.argv[1], 8, filenames=paths)
x, y = next(iter(train))
out["train_batch"] = [list(np.asarray(x).shape), str(np.asarray(x).dtype),
                      list(np.asarray(y).shape), sorted(set(np.asarray(y).ravel().tolist()))]

async def main():
    dt.random.set_seed(1)
    model = dt.keras.Sequential([
        dt.keras.layers.InputLayer(input_shape=(224, 224, 3)),
        dt.keras.layers.Rescaling(1.0 / 128) if hasattr(dt.keras.layers, "Rescaling")
        else dt.keras.layers.Lambda(lambda t: t / 128.0),
        dt.keras.layers.Conv2D(8, 8, strides=8, activation="relu"),
        dt.keras.layers.GlobalAveragePooling2D(),
        dt.keras.layers.Dense(3)])
    model.compile(optimizer=dt.keras.optimizers.Adam(0.02),
                  loss=dt.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = await model.fit(train, epochs=6, steps_per_epoch=3, verbose=0)
    out["losses"] = [float(v) for v in history.history["loss"]]

asyncio.run(main())
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("imagenet")
    done = subprocess.run([sys.executable, "-c", _CHILD, str(data_dir)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, env=child_env())
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert done.returncode == 0 and line, done.stderr[-3000:]
    return json.loads(line[-1][len("RESULT "):])


def test_the_training_path_gives_224_crops_with_labels_and_new_crops_each_epoch(ported):
    assert ported["train_shapes"] == [[[224, 224, 3], "float32"]]
    labels = [(i % 3) for i in range(18)]
    assert ported["train_labels"] == labels * 2   # label - 1, file order, two epochs
    assert ported["epochs_differ"] == 18          # a new crop and flip each epoch
    lo, hi = ported["train_range"]                # means off: below zero and above
    assert lo < -50 and hi > 50


def test_the_eval_path_matches_numpy_resize_central_crop_and_mean_subtraction(ported):
    assert ported["eval_shapes"] == [[[224, 224, 3], "float32"]]
    assert ported["eval_max_error"] < 0.05


def test_input_fn_batches_every_eval_record_once_and_training_batches_of_8(ported):
    assert ported["eval_batches"] == [[4, 224, 224, 3]] * 4 + [[2, 224, 224, 3]]
    assert ported["eval_matched"] == 18
    # one of two pipelines reads file 1 of 3 (6 records), batches of 4 without the remainder
    assert ported["shard_batches"] == [[4, 224, 224, 3]]
    assert ported["cached_batch"] == [4, 224, 224, 3]
    shape, dtype, label_shape, label_values = ported["train_batch"]
    assert shape == [8, 224, 224, 3] and dtype == "float32" and label_shape == [8, 1]
    assert set(label_values) <= {0.0, 1.0, 2.0}


def test_a_keras_model_trained_on_the_pipeline_lowers_its_loss(ported):
    losses = ported["losses"]
    assert len(losses) == 6 and all(np.isfinite(losses))
    assert losses[-1] < 0.7 * losses[0], losses


# -- the compiled bilinear resize (kernels/cpu/resize_jit.py) -------------------------------
class _NoJit:
    def ready(self, dtype):
        return None


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_the_compiled_bilinear_resize_gives_tfs_values_and_the_numpy_paths_bits(dtype,
                                                                                 monkeypatch):
    from kernels.cpu import image_resize
    assert image_resize._JIT.prepare(np.float32)   # compiled (or loaded from the disk cache)
    # TF's image_ops_test ResizeImagesV1Test: BILINEAR, align_corners False, then True
    up = np.array([64, 32, 32, 64, 50, 100], dtype).reshape(1, 3, 2, 1)
    want_up = [64.0, 48.0, 32.0, 32.0, 48.0, 48.0, 48.0, 48.0, 32.0, 48.0, 64.0, 64.0, 41.0,
               61.5, 82.0, 82.0, 50.0, 75.0, 100.0, 100.0, 50.0, 75.0, 100.0, 100.0]
    np.testing.assert_allclose(image_resize.resize_value(up, [6, 4], "bilinear").ravel(),
                               want_up, atol=1e-5)
    corners = np.array([6, 3, 3, 6, 6, 9], dtype).reshape(1, 3, 2, 1)
    want_corners = [6.0, 5.0, 4.0, 3.0, 4.5, 4.5, 4.5, 4.5, 3.0, 4.0, 5.0, 6.0, 4.5, 5.5, 6.5,
                    7.5, 6.0, 7.0, 8.0, 9.0]
    np.testing.assert_allclose(
        image_resize.resize_value(corners, [5, 4], "bilinear", align_corners=True).ravel(),
        want_corners, atol=1e-5)
    rng = np.random.default_rng(5)
    x = (rng.integers(0, 256, (2, 37, 53, 3)) if dtype == np.uint8
         else rng.normal(0, 50, (2, 37, 53, 3))).astype(dtype)
    x = x[:, :, ::-1]   # not contiguous: a flipped crop
    cases = [([224, 224], False, False), ([20, 90], True, False), ([61, 13], False, True)]
    compiled = [image_resize.resize_value(x, s, "bilinear", a, h) for s, a, h in cases]
    monkeypatch.setattr(image_resize, "_JIT", _NoJit())
    for (s, a, h), got in zip(cases, compiled):
        np.testing.assert_array_equal(got, image_resize.resize_value(x, s, "bilinear", a, h))
