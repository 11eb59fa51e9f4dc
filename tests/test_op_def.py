"""The op catalogue (``distrib/framework/op_def.py``): every op type the kernels,
the graph builders and the runtime know has one entry, and each entry's facts
agree with what the runtime, ``dt.function`` and the gradients do with it."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import kernels
from distrib.distribute.functions.def_function import function
from distrib.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError
from distrib.framework import dtypes
from distrib.framework.graph import Graph
from distrib.framework.op_def import OpDef, find_op_def, op_def, op_defs, op_types, register_op
from distrib.ops import array_ops, collective_ops, nn
from distrib.ops import math_ops as ops
from distrib.ops.gradients import get_gradient_function, gradients, register_gradient
from distrib.ops.variables import Variable, is_variable_initialized
from distrib.runtime.core import kernel_pool
from distrib.runtime.step.executor import CompiledPartition
from distrib.runtime.step.plan import partition, place
from distrib.summary import summary_ops
from distrib.train.optimizers.adagrad import AdagradOptimizer
from distrib.train.optimizers.adam import AdamOptimizer
from distrib.train.optimizers.ftrl import FtrlOptimizer
from distrib.train.optimizers.gradient_descent import GradientDescentOptimizer
from distrib.train.optimizers.learning_rate_decay import exponential_decay
from distrib.train.optimizers.momentum import MomentumOptimizer
from distrib.train.optimizers.rmsprop import RMSPropOptimizer
from distrib.train.replicas.sync_replicas import SyncReplicasOptimizer, TokenQueue
from tests.vocabulary_graph import build_vocabulary_family

ROOT = Path(__file__).resolve().parent.parent


# -- every op type has an entry -------------------------------------------------------------
def kernel_ops_without_entry() -> list[str]:
    """Op types with a kernel (CPU or GPU) but no catalogue entry."""
    with_kernels = set(kernels.registered_ops(kernels.CPU)) | set(kernels.registered_ops(kernels.GPU))
    return sorted(t for t in with_kernels if find_op_def(t) is None)


def test_every_op_type_with_a_kernel_has_an_entry():
    assert kernel_ops_without_entry() == []


def test_a_kernel_without_an_entry_is_caught():
    kernels.register("FakeOpOfTheTest", kernels.CPU)(lambda inputs, attrs: [])
    try:
        assert kernel_ops_without_entry() == ["FakeOpOfTheTest"]
    finally:
        kernels.unregister("FakeOpOfTheTest", kernels.CPU)
    assert kernel_ops_without_entry() == []


def test_every_op_the_runtime_runs_through_a_kernel_has_a_cpu_kernel():
    missing = sorted(d.name for d in op_defs()
                     if d.runs_kernel and not kernels.has_kernel(d.name, kernels.CPU))
    assert missing == []
    # the updates the variable store runs call their kernels for the math
    assert all(kernels.has_kernel(t, kernels.CPU) for t in op_types(lambda d: d.slot_attrs))


def _arity_fits(entry: OpDef, n: int) -> bool:
    fixed = [i for i in entry.inputs if not i.endswith(("*", "?"))]
    if any(i.endswith("*") for i in entry.inputs):
        return n >= max(len(fixed), 1)
    return len(fixed) <= n <= len(entry.inputs)


def _build_everything() -> Graph:
    """A graph with the ops of every builder: dt.*, dt.nn, concat, gradients
    (first and second order), variables, the optimizers, sync replicas and
    the collectives."""
    g = Graph()
    with g.as_default():
        x = ops.placeholder(dtypes.float32, [4, 3], name="x")
        with g.device("/job:ps/task:0"):
            w = Variable(np.ones((3, 2), np.float32), name="w")
            b = Variable(np.zeros(2, np.float32), name="b")
            step = Variable(np.int64(0), name="global_step", trainable=False)
        logits = nn.bias_add(ops.matmul(x, w), b)
        h = nn.relu(logits)
        labels = ops.placeholder(dtypes.int32, [4])
        loss = ops.add_n([
            ops.reduce_mean(nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                        logits=logits)),
            ops.reduce_sum(nn.softmax_cross_entropy_with_logits(labels=nn.softmax(h),
                                                                logits=h)),
            ops.reduce_max(nn.log_softmax(h)), ops.reduce_min(ops.sigmoid(h)),
            ops.reduce_prod(ops.tanh(h)), ops.reduce_sum(ops.sqrt(ops.abs(ops.exp(h)))),
            ops.reduce_sum(ops.pow(ops.maximum(h, 1.0), ops.minimum(h, 2.0))),
            ops.reduce_sum(ops.divide(ops.square(ops.negative(h)), ops.subtract(h, 3.0))),
            ops.reduce_sum(ops.log(ops.multiply(ops.sign(h), ops.cast(ops.identity(h), dtypes.float32)))),
            ops.reduce_sum(ops.reshape(ops.transpose(h), [-1])),
            ops.reduce_sum(ops.reshape(h, ops.shape(h))),
        ])
        (gx,) = gradients(loss, [x])
        gradients(ops.reduce_sum(gx), [x])   # second order: the gradients of gradient ops
        gradients(ops.reduce_sum(array_ops.concat([h, ops.stop_gradient(h)], 0)), [x])
        ops.argmax(h, 1)
        ops.logical_or(ops.less_equal(h, 1.0), ops.not_equal(h, ops.zeros_like(h)))
        ops.logical_and(ops.greater_equal(h, 0.0), ops.equal(h, ops.ones_like(h)))
        ops.add(ops.zeros([2]), ops.ones([2]))
        ops.add(ops.random_normal([2], seed=1), ops.random_uniform([2]))
        ops.group(ops.no_op(), w.assign_add(w), w.assign_sub(w), w.assign(w.read_value()))
        is_variable_initialized(w)
        grads_and_vars = [(g_, v) for g_, v in zip(gradients(loss, [w, b]), [w, b])]
        for opt in (GradientDescentOptimizer(0.1), MomentumOptimizer(0.1, 0.9),
                    AdagradOptimizer(0.1), AdamOptimizer(0.1), RMSPropOptimizer(0.1),
                    RMSPropOptimizer(0.1, centered=True)):
            opt.apply_gradients(grads_and_vars)
        exponential_decay(0.1, step, 10, 0.5, staircase=True)   # Floor
        sync = SyncReplicasOptimizer(GradientDescentOptimizer(0.1), replicas_to_aggregate=2)
        sync.apply_gradients(grads_and_vars, global_step=step)
        sync.num_accumulated()
        queue = TokenQueue(step)
        queue.enqueue_many(ops.constant([1, 2], dtype=dtypes.int64))
        queue.size()
        queue.close()
        common = {"group_size": 2, "group_key": 1, "instance_key": 1}
        v = ops.constant([1.0, 2.0])
        collective_ops.all_reduce(v, **common)
        collective_ops.all_gather(v, **common)
        collective_ops.broadcast_send(v, [2], dtypes.float32, **common)
        collective_ops.broadcast_recv([2], dtypes.float32, **common)
        # the summary ops (distrib.summary.summary_ops) and their merge
        summary_ops.scalar_op("loss", loss)
        summary_ops.histogram_op("h", h)
        summary_ops.image_op("img", ops.reshape(h, [1, 4, -1, 1]))
        summary_ops.text_op("note", ops.constant("text"))
        summary_ops.merge_all()
        _build_conv_family(h)
        _build_input_family(h)
        _build_gather_family(h)
        build_vocabulary_family(h, step)   # issue 39's everyday vocabulary
        from tests.everyday_graph import build_everyday_family
        build_everyday_family(h)   # issue 39's remainder: py_function, einsum, gather_nd ...
    return g


def _build_input_family(h: object) -> None:
    """TF1's queue-based input and the image ops (distrib.ops.data_flow_ops, io_ops,
    slicing_ops, image_ops; distrib.train.input), and their gradients."""
    from distrib import image
    from distrib.ops import io_ops, slicing_ops
    from distrib.ops.data_flow_ops import FIFOQueue
    from distrib.train.input.input import shuffle_batch, string_input_producer
    files = string_input_producer(["a.bin"], num_epochs=1)   # RandomShuffle, CountUpTo
    _, value = io_ops.FixedLengthRecordReader(4).read(files)
    pixels = ops.cast(ops.reshape(io_ops.decode_raw(value, dtypes.uint8), [1, 2, 2]),
                      dtypes.float32)
    shuffle_batch([pixels], 2, capacity=10, min_after_dequeue=2)   # RandomShuffleQueueV2 ...
    # a queue runner's enqueue vectorized: ReaderReadUpToV2, BatchSlice, BatchSelect
    # (distrib.train.input.vectorize)
    from distrib.train.input.vectorize import vectorized_enqueue
    crops = FIFOQueue(4, dtypes.float32, shapes=[[1, 1, 1]])
    crop = image.random_flip_left_right(
        image.random_crop(ops.reshape(pixels, [2, 2, 1]), [1, 1, 1]))
    assert vectorized_enqueue(crops.enqueue(crop), 2) is not None
    q = FIFOQueue(3, dtypes.float32, shapes=[[]])
    q.enqueue_many([ops.constant([1.0])]), q.size(), q.dequeue_up_to(1), q.dequeue()
    img = ops.reshape(h, [2, 2, 2])
    y = image.random_flip_left_right(image.random_contrast(image.random_crop(img, [2, 1, 2]),
                                                           0.5, 1.5))
    y = image.resize_with_crop_or_pad(slicing_ops.strided_slice(y, [0], [1]), 3, 3)
    gradients(ops.reduce_sum(y), [h])   # the gradient ops of the chain above
    # files, Examples, codecs, resizing and colour (issue 40), and the resizes' gradients
    from distrib.ops import parsing_ops
    parsed = parsing_ops.parse_example(ops.reshape(value, [1]), {
        "s": parsing_ops.VarLenFeature(dtypes.int64),
        "d": parsing_ops.FixedLenFeature([], dtypes.string, default_value="")})
    pixels = image.decode_image(image.encode_png(image.decode_png(parsing_ops.read_file("a"))),
                                expand_animations=False)
    image.encode_jpeg(image.decode_jpeg(parsed["d"][0]))
    small = image.resize(img, [3, 3]) + image.resize(img, [3, 3], "nearest")
    gradients(ops.reduce_sum(small), [h])   # AdjustHue, AdjustSaturation, ResizeArea: none
    image.adjust_hue(image.adjust_saturation(image.resize(pixels, [2, 2], "area"), 0.5), 0.1)
    # the bounding-box crop of ImageNet preprocessing (issue 40), and BroadcastTo's gradient
    jpeg = parsed["d"][0]
    begin, size, _ = image.sample_distorted_bounding_box(
        image.extract_jpeg_shape(jpeg), ops.constant([[[0.0, 0.0, 1.0, 1.0]]]))
    image.decode_and_crop_jpeg(jpeg, array_ops.concat([begin[:2], size[:2]], 0))
    from distrib.ops.broadcast_ops import broadcast_to
    gradients(ops.reduce_sum(broadcast_to(h, [2, 4, 2])), [h])


def _build_gather_family(h: object) -> None:
    """The embeddings' ops (issue 41): gathers, segments, partitions, scatters, every
    optimizer's sparse update, and the sync replicas' sparse accumulator."""
    from distrib.ops import array_gather as ag
    from distrib.ops.indexed_slices import IndexedSlices
    with ops.get_default_graph().device("/job:ps/task:0"):
        table = Variable(np.ones((5, 2), np.float32), name="table")
    ids = ops.constant([3, 0, 3])
    rows = ag.gather(table, ids) + ag.gather(ops.reshape(h, [4, 2]), ids)
    parts = ag.dynamic_partition(rows, ops.constant([0, 1, 0]), 2)
    y = ag.dynamic_stitch([ops.constant([1]), ops.constant([0, 2])], [parts[1], parts[0]])
    y = ag.segment_mean(y, ids) + ag.segment_sum(y, ids)
    loss = ops.reduce_sum(ag.unsorted_segment_sum(y, ids, 4))
    sparse = gradients(loss, [table])[0]
    ag.unique(ids)
    ag.sparse_to_dense(ops.constant([1, 2]), [4], 1.0, 0.0)
    ag.scatter_update(table, ids, ops.ones([3, 2]))
    ag.scatter_nd_update(table, ops.constant([[1, 1]]), ops.constant([2.0]))
    ag.scatter_add(table, ids, 1.0)
    for opt in (GradientDescentOptimizer(0.1), MomentumOptimizer(0.1, 0.9),
                AdagradOptimizer(0.1), AdamOptimizer(0.1), RMSPropOptimizer(0.1),
                RMSPropOptimizer(0.1, centered=True), FtrlOptimizer(0.1),
                FtrlOptimizer(0.1, l2_shrinkage_regularization_strength=0.1)):
        opt.apply_gradients([(sparse, table)])
    from distrib.train.optimizers.global_step import get_or_create_global_step
    SyncReplicasOptimizer(GradientDescentOptimizer(0.1), replicas_to_aggregate=2)\
        .apply_gradients([(IndexedSlices(sparse.values, sparse.indices), table)],
                         global_step=get_or_create_global_step())
    # the Keras lookup layers' ops on graph tensors (LookupTableFindV2,
    # StringToHashBucketFast, DenseBincount)
    from distrib.keras.lookup_layers import CategoryEncoding, Hashing, StringLookup
    words = ops.constant(["a", "b", "zz"])
    StringLookup(vocabulary=["a", "b"])(words)
    Hashing(num_bins=3)(words)
    CategoryEncoding(num_tokens=4, output_mode="multi_hot")(ops.constant([[0, 1], [2, 3]]))


def _build_conv_family(h: object) -> None:
    """The convolution, pooling, normalization and top-k ops, and their
    gradients (distrib.ops.nn_conv ... conv_grad)."""
    img = ops.reshape(h, [1, 2, 2, 2])
    f = ops.constant(np.ones((1, 1, 2, 2), np.float32))
    y = nn.conv2d_transpose(nn.conv2d(img, f, 1, "SAME"), f, [1, 2, 2, 2], 1)
    y = nn.depthwise_conv2d(y, ops.constant(np.ones((1, 1, 2, 1), np.float32)), 1, "SAME")
    y = nn.lrn(nn.avg_pool(nn.max_pool(y, 1, 1, "SAME"), 1, 1, "SAME"))
    y, _, _ = nn.fused_batch_norm(y, np.ones(2, np.float32), np.zeros(2, np.float32))
    values, _ = nn.top_k(ops.reshape(y, [4, 2]), 1)
    gradients(ops.reduce_sum(values), [h])   # every gradient op of the chain above
    nn.in_top_k(ops.reshape(h, [4, 2]), ops.constant([0, 1, 1, 0]), 1)


def test_every_op_the_builders_and_the_partitioner_make_has_an_entry_of_its_arity():
    g = _build_everything()
    gd = g.as_graph_def()
    nodes = {n["name"]: n for n in gd["nodes"]}
    order = list(nodes)
    placed = place(nodes, order, default_job="worker", default_task=0,
                   tasks={"worker": [0], "ps": [0]})
    parts = partition(nodes, order, placed, [], [])
    seen = {}
    for part in parts.values():
        for node in part.nodes:
            entry = op_def(node["op"])   # NotFoundError names a type without an entry
            n = sum(1 for i in node["inputs"] if not i.startswith("^"))
            assert _arity_fits(entry, n), (node["name"], node["op"], n, entry.inputs)
            seen.setdefault(node["op"], node["name"])
    # the graph above makes every op type of the catalogue but the kernel-only ones
    # (and the ops a worker makes when it compiles a partition: the GPU fusion's;
    # and the one the master's graph optimizer makes: _FusedElementwise)
    assert sorted(set(d.name for d in op_defs()) - set(seen)
                  - {"_FusedBiasRelu", "_FusedElementwise"}) == []


def test_unknown_op_type_is_not_found_naming_it():
    with pytest.raises(NotFoundError, match="'NoSuchOp'.*op catalogue"):
        op_def("NoSuchOp")
    assert find_op_def("NoSuchOp") is None
    with pytest.raises(NotFoundError, match="NoSuchOp"):
        register_gradient("NoSuchOp")(lambda op, g: [g])


def test_register_op_refuses_a_second_entry_and_contradicting_facts():
    with pytest.raises(AlreadyExistsError, match="MatMul"):
        register_op("MatMul")
    with pytest.raises(InvalidArgumentError, match="must be stateful"):
        register_op("BadResourceOpOfTheTest", is_resource=True)
    with pytest.raises(InvalidArgumentError, match="shape_only_inputs"):
        register_op("BadShapeOnlyOpOfTheTest", inputs=("x",), shape_only_inputs=(1,))
    assert find_op_def("BadResourceOpOfTheTest") is None


def test_entries_are_frozen():
    with pytest.raises(AttributeError):
        op_def("MatMul").is_stateful = True   # type: ignore[misc]


# -- the facts agree with the runtime ---------------------------------------------------------
def _node(name: str, op: str, inputs: list[str]) -> dict:
    return {"name": name, "op": op, "inputs": inputs, "device": "", "attrs": {}}


def test_the_executor_runs_a_kernel_exactly_for_the_ops_that_say_so_and_honours_shape_only():
    nodes = [_node("p", "Placeholder", [])]
    for d in op_defs():
        n = sum(2 if i.endswith("*") else 1 for i in d.inputs)
        nodes.append(_node(f"n/{d.name}", d.name, ["p:0"] * n))
    compiled = CompiledPartition(nodes, [])
    for i, node in enumerate(nodes):
        entry = op_def(node["op"])
        assert (compiled.kernels[i] is not None) == entry.runs_kernel, node["op"]
        assert [k for k, flag in enumerate(compiled.shape_only[i]) if flag] \
            == list(entry.shape_only_inputs), node["op"]
        assert (compiled.flops_of[i] is not None) == (entry.heavy is not None)


def test_heavy_ops_are_weighed_by_their_flops_and_the_others_by_their_bytes():
    matmul = op_def("MatMul").heavy
    big, small = np.ones((1024, 1024), np.float32), np.ones((8, 8), np.float32)
    assert kernel_pool.weigh(matmul, [big, big], {})[0] == 2      # 2^30 multiply-adds
    assert kernel_pool.weigh(matmul, [small, small], {})[0] == 0
    assert kernel_pool.weigh(op_def("Add").heavy, [small, small], {})[0] == 0
    assert kernel_pool.weigh(op_def("Add").heavy, [big, big, big, big], {})[0] == 1  # 16 MiB


def test_a_traced_function_runs_exactly_the_ops_with_side_effects():
    effects = op_types(lambda d: d.has_side_effects)
    stateful = op_types(lambda d: d.is_stateful)
    # the stateful ops a function may leave out are reads, never updates
    assert all(not op_def(t).is_update for t in stateful - effects)
    assert effects >= op_types(lambda d: d.is_update or d.is_collective)

    def body():
        one = ops.constant(1.0)
        for d in op_defs():
            if d.is_stateful or d.is_collective or d.has_side_effects:   # + a random sampler
                ins = [one] * sum(2 if i.endswith("*") else 1 for i in d.inputs)
                one.graph.create_op(d.name, ins, {"var": "v", "acc": "a", "queue": "q"},
                                    f"made/{d.name}", output_specs=[])
        return one

    g = Graph()
    with g.as_default():
        traced = function(body).get_concrete_function()
    kept = {op.type for op in traced.side_effect_ops}
    assert kept == effects


def test_every_op_with_a_gradient_has_a_differentiable_input():
    for d in op_defs():
        if d.gradient is None:
            continue
        # (a variable's rows, read when the op runs, are differentiated at the variable)
        assert not d.no_gradient and (not d.is_stateful or d.name == "ResourceGather"), d.name
        assert [k for k in range(len(d.inputs)) if k not in d.shape_only_inputs], d.name


def test_a_gradient_registered_in_the_ops_layer_is_the_entrys():
    g = Graph()
    with g.as_default():
        y = ops.matmul(ops.constant([[1.0]]), ops.constant([[2.0]]))
    assert get_gradient_function(y.op) is op_def("MatMul").gradient is not None
    assert op_def("Equal").no_gradient and op_def("Equal").gradient is None


# -- the document ------------------------------------------------------------------------------
def test_docs_name_every_op_type_of_the_catalogue():
    text = (ROOT / "docs" / "ops.md").read_text()
    named = set(re.findall(r"`([A-Z_][A-Za-z0-9]+)`", text))
    assert sorted(d.name for d in op_defs() if d.name not in named) == []
