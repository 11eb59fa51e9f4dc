"""Static shapes and build-time errors of the convolution, pooling,
normalization and top-k ops, and the ``dt.nn`` builders' TF signatures
(``distrib/framework/conv_shapes.py``, ``nn_shapes.py``, ``distrib/ops/nn_*.py``).

Expected shapes are TF's rule written out by hand per case (see
``conv_shapes``' header): VALID ``(in - eff + stride) // stride``, SAME
``ceil(in / stride)``, EXPLICIT VALID on the padded input; no kernel runs."""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt
from distrib.errors import InvalidArgumentError
from distrib.framework.conv_shapes import window_output
from distrib.ops.nn_conv import NNArgumentError, get_sequence


@pytest.fixture(autouse=True)
def graph():
    g = dt.Graph()
    with g.as_default():
        yield g


def _ph(shape, dtype=dt.float32):
    return dt.placeholder(dtype, shape)


def _shape(t):
    return t.shape.as_list()


# -- the window rule ----------------------------------------------------------------------------
@pytest.mark.parametrize("size,k,stride,dil,padding,pads,want", [
    (7, 2, 3, 1, "VALID", (0, 0), 2), (7, 3, 1, 1, "VALID", (0, 0), 5),
    (5, 3, 2, 1, "SAME", (0, 0), 3), (4, 1, 2, 1, "SAME", (0, 0), 2),
    (5, 3, 1, 2, "VALID", (0, 0), 1), (5, 3, 1, 3, "VALID", (0, 0), -1),
    (1, 4, 2, 1, "VALID", (0, 0), 0),   # C's truncating division: -1 / 2 is 0
    (2, 3, 1, 1, "VALID", (0, 0), 0), (1, 2, 1, 1, "EXPLICIT", (3, 4), 7),
    (24, 3, 2, 1, "SAME", (0, 0), 12), (None, 3, 1, 1, "SAME", (0, 0), None),
])
def test_window_output_is_tfs_rule(size, k, stride, dil, padding, pads, want):
    assert window_output(size, k, stride, dil, padding, pads) == want


# -- conv2d ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("x,f,kw,want", [
    ([1, 2, 3, 3], [1, 1, 3, 3], {"strides": 1, "padding": "VALID"}, [1, 2, 3, 3]),
    ([1, 2, 3, 3], [2, 2, 3, 3], {"strides": [2, 2], "padding": "SAME"}, [1, 1, 2, 3]),
    ([1, 3, 6, 1], [2, 2, 1, 1], {"strides": [1, 1, 2, 1], "padding": "VALID"}, [1, 2, 3, 1]),
    ([1, 7, 7, 1], [2, 2, 1, 1], {"strides": 3, "padding": "VALID"}, [1, 2, 2, 1]),
    ([1, 4, 4, 1], [2, 2, 1, 2], {"strides": 1, "padding": "VALID", "dilations": 2},
     [1, 2, 2, 2]),
    ([1, 1, 1, 3], [2, 2, 3, 3], {"strides": 1, "padding": [[0, 0], [3, 4], [4, 2], [0, 0]]},
     [1, 7, 6, 3]),
    ([None, 24, 24, 3], [5, 5, 3, 64], {"strides": [1, 1, 1, 1], "padding": "SAME"},
     [None, 24, 24, 64]),
    ([None, None, 9, 3], [3, 3, 3, 8], {"strides": 2, "padding": "VALID"}, [None, None, 4, 8]),
    ([2, 3, 8, 8], [3, 3, 3, 5], {"strides": 2, "padding": "SAME", "data_format": "NCHW"},
     [2, 5, 4, 4]),
    ([2, 5, 5, 4], [3, 3, 2, 6], {"strides": 1, "padding": "VALID"}, [2, 3, 3, 6]),  # groups
])
def test_conv2d_static_shape(x, f, kw, want):
    assert _shape(dt.nn.conv2d(_ph(x), _ph(f), **kw)) == want


def test_conv2d_takes_tf2_keywords_and_unknown_ranks():
    y = dt.nn.conv2d(input=_ph([1, 5, 5, 2]), filters=_ph([3, 3, 2, 4]), strides=1,
                     padding="SAME", dilations=None)
    assert _shape(y) == [1, 5, 5, 4] and y.op.type == "Conv2D"
    assert y.op.attrs["strides"] == [1, 1, 1, 1] and y.op.attrs["explicit_paddings"] == []
    assert _shape(dt.nn.conv2d(_ph(None), _ph([3, 3, 2, 4]), 1, "SAME")) == [None] * 3 + [4]
    with pytest.raises(NNArgumentError, match="both 'filters' and 'filter'"):
        dt.nn.conv2d(_ph([1, 5, 5, 2]), _ph([3, 3, 2, 4]), 1, "SAME", filters=_ph([1, 1, 2, 2]))


@pytest.mark.parametrize("x,f,kw,match", [
    ([1, 5, 5, 3], [3, 3, 2, 4], {"strides": 1, "padding": "SAME"}, "not a multiple"),
    ([1, 5, 5], [3, 3, 3, 4], {"strides": 1, "padding": "SAME"}, "4-dimensional"),
    ([1, 5, 5, 3], [3, 3, 3, 4], {"strides": [2, 1, 1, 1], "padding": "SAME"},
     "batch and depth"),
    ([1, 5, 5, 3], [3, 3, 3, 4], {"strides": 1, "padding": "FULL"}, "padding must be"),
    ([1, 1, 2, 3], [3, 3, 3, 4], {"strides": 1, "padding": "VALID"}, "negative"),
    ([1, 5, 5, 3], [3, 3, 3, 4], {"strides": 1, "padding": [[1, 1], [1, 1], [1, 1], [1, 1]]},
     "batch and"),
    ([1, 5, 5, 3], [3, 3, 3, 4], {"strides": 1, "padding": "SAME", "data_format": "NWHC"},
     "data_format"),
])
def test_conv2d_bad_arguments_fail_at_build_time(x, f, kw, match):
    with pytest.raises(InvalidArgumentError, match=match):
        dt.nn.conv2d(_ph(x), _ph(f), **kw)


def test_conv2d_dtypes_are_tfs():
    ints = dt.nn.conv2d(_ph([1, 3, 3, 1], dt.int32), _ph([1, 1, 1, 1], dt.int32), 1, "SAME")
    assert ints.dtype == dt.int32   # TF's Conv2D takes int32; its gradients do not
    with pytest.raises(InvalidArgumentError, match="floating-point"):
        dt.nn.depthwise_conv2d_native(_ph([1, 3, 3, 1], dt.int32), _ph([1, 1, 1, 1], dt.int32),
                                      [1, 1, 1, 1], "SAME")
    with pytest.raises(InvalidArgumentError, match="groups"):
        dt.nn.conv2d(_ph([1, 3, 3, 4]), _ph([1, 1, 2, 3]), 1, "SAME")
    with pytest.raises(InvalidArgumentError):
        dt.nn.conv2d(_ph([1, 3, 3, 1], dt.float64), _ph([1, 1, 1, 1]), 1, "SAME")


@pytest.mark.parametrize("value,n,channel,want", [
    (None, 2, 3, [1, 1, 1, 1]), (2, 2, 3, [1, 2, 2, 1]), ([3], 2, 1, [1, 1, 3, 3]),
    ([2, 3], 2, 3, [1, 2, 3, 1]), ([1, 2, 3, 1], 2, 3, [1, 2, 3, 1]),
])
def test_get_sequence_is_tfs(value, n, channel, want):
    assert get_sequence(value, n, channel, "strides") == want


def test_get_sequence_refuses_three_ints_as_tf_does():
    with pytest.raises(ValueError, match="length 1, 2 or 4"):
        dt.nn.conv2d(_ph([1, 5, 5, 3]), _ph([3, 3, 3, 4]), [1, 2, 2], "SAME")


# -- backprops and transpose ------------------------------------------------------------------------
def test_conv2d_transpose_shape_and_checks():
    x, f = _ph([None, 4, 4, 8]), _ph([3, 3, 5, 8])
    y = dt.nn.conv2d_transpose(x, f, [2, 8, 8, 5], strides=2, padding="SAME")
    assert y.op.type == "Conv2DBackpropInput" and _shape(y) == [2, 8, 8, 5]
    y = dt.nn.conv2d_transpose(input=x, filters=f, output_shape=dt.constant([2, 9, 9, 5]),
                               strides=[2, 2], padding="VALID")
    assert _shape(y) == [2, 9, 9, 5]
    with pytest.raises(InvalidArgumentError, match="gives"):
        dt.nn.conv2d_transpose(x, f, [2, 12, 12, 5], strides=2, padding="SAME")
    with pytest.raises(InvalidArgumentError, match="output depth"):
        dt.nn.conv2d_transpose(_ph([1, 4, 4, 7]), f, [1, 8, 8, 5], strides=2)
    with pytest.raises(ValueError, match="4 elements"):
        dt.nn.conv2d_transpose(x, f, [8, 8, 5], strides=2)


def test_backprop_shapes_come_from_a_constant_or_a_shape():
    x = _ph([None, 6, 6, 3])
    f = _ph([3, 3, 3, 4])
    dy = _ph([None, 3, 3, 4])
    dx = dt.nn.conv2d_backprop_input(dt.shape(x), f, dy, [1, 2, 2, 1], "SAME")
    assert _shape(dx) == [None, 6, 6, 3]
    df = dt.nn.conv2d_backprop_filter(x, [3, 3, 3, 4], dy, 2, "SAME")
    assert _shape(df) == [3, 3, 3, 4]
    free = dt.placeholder(dt.int32, [4])
    assert _shape(dt.nn.conv2d_backprop_input(free, f, dy, 2, "SAME")) == [None] * 3 + [3]


def test_gradient_ops_carry_the_static_shapes_of_the_forward():
    x, f = _ph([None, 8, 8, 3]), dt.constant(np.ones((3, 3, 3, 4), np.float32))
    y = dt.nn.conv2d(x, f, 2, "SAME", dilations=1)
    gx, gf = dt.gradients(dt.reduce_sum(y), [x, f])
    assert (_shape(gx), _shape(gf)) == ([None, 8, 8, 3], [3, 3, 3, 4])
    assert gx.op.attrs["strides"] == [1, 2, 2, 1] and gx.op.type == "Conv2DBackpropInput"
    assert gx.op.inputs[0].op.type == "Shape" and gf.op.inputs[1].op.type == "Const"


# -- depthwise and separable ------------------------------------------------------------------------
def test_depthwise_and_separable_shapes():
    x = _ph([2, 9, 9, 3])
    y = dt.nn.depthwise_conv2d(x, _ph([3, 3, 3, 2]), [1, 1, 1, 1], "SAME", rate=[2, 2])
    assert y.op.type == "DepthwiseConv2dNative" and _shape(y) == [2, 9, 9, 6]
    assert y.op.attrs["dilations"] == [1, 2, 2, 1]
    y = dt.nn.depthwise_conv2d_native(x, _ph([3, 3, 3, 1]), [1, 2, 2, 1], "VALID")
    assert _shape(y) == [2, 4, 4, 3]
    y = dt.nn.separable_conv2d(x, _ph([3, 3, 3, 2]), _ph([1, 1, 6, 5]), [1, 1, 1, 1], "VALID")
    assert _shape(y) == [2, 7, 7, 5] and y.op.type == "Conv2D"
    with pytest.raises(InvalidArgumentError, match="input depth"):
        dt.nn.depthwise_conv2d(x, _ph([3, 3, 4, 2]), [1, 1, 1, 1], "SAME")
    with pytest.raises(InvalidArgumentError, match="pointwise_filter"):
        dt.nn.separable_conv2d(x, _ph([3, 3, 3, 2]), _ph([3, 3, 6, 5]), 1, "VALID")
    with pytest.raises(ValueError, match="strides > 1"):
        dt.nn.depthwise_conv2d(x, _ph([3, 3, 3, 2]), [1, 2, 2, 1], "SAME", rate=2)


# -- pooling -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", ["max_pool", "avg_pool", "max_pool2d", "avg_pool2d"])
def test_pool_shapes_and_tf1_forms(fn):
    pool = getattr(dt.nn, fn)
    x = _ph([None, 24, 24, 64])
    y = pool(x, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
    assert _shape(y) == [None, 12, 12, 64]
    assert _shape(pool(x, 3, 2, "VALID")) == [None, 11, 11, 64]
    assert _shape(pool(_ph([1, 64, 9, 7]), [2, 3], [2, 1], "VALID", data_format="NCHW")) == \
        [1, 64, 4, 5]
    assert y.op.attrs["ksize"] == [1, 3, 3, 1]


def test_max_pool_takes_explicit_padding_and_avg_pool_does_not():
    y = dt.nn.max_pool(_ph([1, 4, 4, 1]), 2, 2, [[0, 0], [1, 1], [0, 1], [0, 0]])
    assert _shape(y) == [1, 3, 2, 1] and y.op.attrs["explicit_paddings"] == [0, 0, 1, 1, 0, 1,
                                                                              0, 0]
    with pytest.raises(ValueError, match="explicit"):
        dt.nn.avg_pool(_ph([1, 4, 4, 1]), 2, 2, [[0, 0], [1, 1], [0, 1], [0, 0]])


@pytest.mark.parametrize("kw,match", [
    ({"ksize": [2, 2, 2, 1], "strides": 1, "padding": "SAME"}, "batch and depth"),
    ({"ksize": 0, "strides": 1, "padding": "SAME"}, "cannot be zero"),
    ({"ksize": 6, "strides": 1, "padding": "VALID"}, "negative"),
    ({"ksize": 2, "strides": [1, 1, 1, 2], "padding": "VALID"}, "batch and depth"),
])
def test_pool_bad_arguments(kw, match):
    with pytest.raises(InvalidArgumentError, match=match):
        dt.nn.max_pool(_ph([1, 4, 4, 3]), **kw)


def test_avg_pool_of_an_integer_tensor_is_refused():
    with pytest.raises(InvalidArgumentError, match="floating-point"):
        dt.nn.avg_pool(_ph([1, 4, 4, 1], dt.int32), 2, 2, "VALID")


# -- normalization ----------------------------------------------------------------------------------
def test_lrn_and_its_aliases():
    x = _ph([None, 6, 6, 8])
    y = dt.nn.lrn(x, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)
    assert y.op.type == "LRN" and _shape(y) == [None, 6, 6, 8]
    assert y.op.attrs == {"depth_radius": 4, "bias": 1.0, "alpha": 0.001 / 9.0, "beta": 0.75}
    assert dt.nn.local_response_normalization is dt.nn.lrn
    with pytest.raises(InvalidArgumentError, match="4-dimensional"):
        dt.nn.lrn(_ph([6, 8]))


def test_fused_batch_norm_outputs_and_rules():
    x = _ph([None, 5, 5, 4])
    y, mean, var = dt.nn.fused_batch_norm(x, np.ones(4, np.float32), np.zeros(4, np.float32))
    assert (_shape(y), _shape(mean), _shape(var)) == ([None, 5, 5, 4], [4], [4])
    assert y.op.type == "FusedBatchNormV3" and len(y.op.outputs) == 6
    assert y.op.inputs[3].shape.as_list() == [0]   # no moving statistics: empty
    assert y.op.attrs["epsilon"] == 0.001 and y.op.attrs["is_training"]
    y, _, _ = dt.nn.fused_batch_norm(x, np.ones(4), np.zeros(4), np.zeros(4), np.ones(4),
                                     epsilon=1e-7, is_training=False)
    assert y.op.attrs["epsilon"] == pytest.approx(1.001e-5) and not y.op.attrs["is_training"]
    with pytest.raises(ValueError, match="mean' and 'variance'"):
        dt.nn.fused_batch_norm(x, np.ones(4), np.zeros(4), is_training=False)
    with pytest.raises(InvalidArgumentError, match="channels"):
        dt.nn.fused_batch_norm(x, np.ones(3, np.float32), np.zeros(3, np.float32))
    y, _, _ = dt.nn.fused_batch_norm(_ph([2, 4, 5, 5]), np.ones(4), np.zeros(4),
                                     data_format="NCHW")
    assert _shape(y) == [2, 4, 5, 5]


def test_moments_shapes_and_keepdims_spellings():
    x = _ph([None, 5, 5, 4])
    mean, var = dt.nn.moments(x, [0, 1, 2])
    assert (_shape(mean), _shape(var)) == ([4], [4])
    mean, var = dt.nn.moments(x, [0, 1, 2], keep_dims=True)
    assert _shape(mean) == [1, 1, 1, 4]
    mean, _ = dt.nn.moments(_ph([None, None, 3]), [2], keepdims=False)
    assert _shape(mean) == [None, None]
    with pytest.raises(ValueError, match="both"):
        dt.nn.moments(x, [0], keep_dims=True, keepdims=True)


def test_composite_normalizations_keep_shapes():
    x = _ph([None, 3, 4])
    assert _shape(dt.nn.l2_normalize(x, axis=-1)) == [None, 3, 4]
    assert _shape(dt.nn.l2_normalize(x, dim=1)) == [None, 3, 4]
    assert _shape(dt.nn.batch_normalization(x, 0.5, 2.0, None, None, 1e-3)) == [None, 3, 4]


# -- top k and the classifier's helpers ------------------------------------------------------------
def test_top_k_and_in_top_k_shapes():
    values, indices = dt.nn.top_k(_ph([None, 10]), k=3)
    assert (_shape(values), _shape(indices)) == ([None, 3], [None, 3])
    assert indices.dtype == dt.int32 and values.op.type == "TopKV2"
    _, i64 = dt.nn.top_k(_ph([2, 5, 7]), 2, index_type=dt.int64)
    assert i64.dtype == dt.int64 and _shape(i64) == [2, 5, 2]
    free, _ = dt.nn.top_k(_ph([2, 7]), dt.placeholder(dt.int32, []))
    assert _shape(free) == [2, None]
    with pytest.raises(InvalidArgumentError, match="at least k=4"):
        dt.nn.top_k(_ph([2, 3]), 4)
    hit = dt.nn.in_top_k(_ph([None, 10]), dt.placeholder(dt.int64, [None]), 1)
    assert hit.dtype == dt.bool and _shape(hit) == [None] and hit.op.type == "InTopKV2"
    with pytest.raises(InvalidArgumentError, match="batch sizes"):
        dt.nn.in_top_k(_ph([4, 10]), dt.placeholder(dt.int32, [5]), 1)


def test_classifier_helpers_shapes():
    logits = _ph([None, 10])
    assert _shape(dt.nn.sigmoid_cross_entropy_with_logits(labels=_ph([None, 10]),
                                                          logits=logits)) == [None, 10]
    with pytest.raises(ValueError, match="named arguments"):
        dt.nn.sigmoid_cross_entropy_with_logits(logits, logits)
    with pytest.raises(ValueError, match="same shape"):
        dt.nn.sigmoid_cross_entropy_with_logits(labels=_ph([None, 9]), logits=logits)
    assert _shape(dt.nn.softmax_cross_entropy_with_logits_v2(_ph([None, 10]), logits)) == [None]
    assert _shape(dt.nn.softmax_cross_entropy_with_logits_v2(
        _ph([2, None, 10]), _ph([2, None, 10]))) == [2, None]
    assert _shape(dt.nn.xw_plus_b(logits, _ph([10, 3]), _ph([3]))) == [None, 3]
    frac = dt.nn.zero_fraction(logits)
    assert frac.dtype == dt.float32 and _shape(frac) == []


# -- the kernel pool's weights ------------------------------------------------------------------------
def test_convolutions_are_weighed_by_their_multiply_adds():
    """CIFAR-10's conv1 (128 x 24 x 24 x 3 by 5 x 5 x 3 x 64, SAME) and its two
    backprops each cost 128 * 24 * 24 * 5 * 5 * 3 * 64 multiply-adds."""
    from distrib.framework.op_def import op_def
    macs = 128 * 24 * 24 * 5 * 5 * 3 * 64
    x, w = np.zeros([128, 24, 24, 3], np.float32), np.zeros([5, 5, 3, 64], np.float32)
    dy = np.zeros([128, 24, 24, 64], np.float32)
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NHWC"}
    assert op_def("Conv2D").heavy([x, w], attrs) == macs
    assert op_def("Conv2DBackpropInput").heavy([np.array(x.shape), w, dy], attrs) == macs
    assert op_def("Conv2DBackpropFilter").heavy([x, np.array(w.shape), dy], attrs) == macs
    nchw = {**attrs, "strides": [1, 1, 2, 2], "data_format": "NCHW"}
    assert op_def("Conv2D").heavy([np.zeros([128, 3, 24, 24]), w], nchw) == macs // 4
    dw = np.zeros([3, 3, 3, 2], np.float32)
    assert op_def("DepthwiseConv2dNative").heavy([x, dw], attrs) == 128 * 24 * 24 * 9 * 3 * 2
