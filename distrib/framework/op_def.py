"""The op catalogue: one entry per op type with every fact the graph, the
gradients and the runtime keep about it (TF's ``OpDef`` registry and its
``REGISTER_OP("MatMul").SetShapeFn(...)``).

An entry (:class:`OpDef`) says what an op type *is*: its inputs, its shape
function, whether it touches state that outlives a step (a variable, an
accumulator or queue), whether it is a collective, whether it writes a
variable, which inputs it reads only for their shape, how heavy a run of it
is, whether a traced function must run it unfetched, and its gradient. How
it runs lives elsewhere, beside the code that does it: kernels in
``kernels/`` (keyed by op type and device; ``kernels`` never imports
``distrib``, so it cannot read this), the variable and resource ops in
``distrib.runtime.state``, the collectives in ``distrib.runtime.collective``;
what they need to know about an op type, they read here, so an op type's
facts are in one place and cannot disagree between two modules.

Rules:

* Every op type the graph builders emit, the runtime inserts (``_Send``,
  ``_Recv``) or the kernels implement has an entry; ``tests/test_op_def.py``
  fails when a kernel has none. :func:`op_def` of an unknown type is a
  ``NotFoundError`` naming it.
* Entries are immutable (frozen, slotted): the runtime derives the sets it
  tests per op on its hot path (a frozenset of the resource ops, say) once,
  at import, with :func:`op_types`, so a step pays a set test, not a lookup
  (an op type registered after that import is not in those sets).
* The one fact written later is the gradient: the ops layer defines the
  built-in ones by family (``distrib.ops.math_grad``, ``nn_grad`` ...), and
  ``distrib.ops.gradients`` writes them into the catalogue, as a user's
  ``register_gradient`` does (:func:`set_gradient` replaces the entry with
  one that has it), so the entry is where the gradient is looked up; look
  it up when needed rather than keep an entry.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from distrib.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError
from distrib.framework import (
    conv_shapes,
    gather_shapes,
    io_shapes,
    nn_shapes,
    op_shapes,
    slicing_shapes,
    vocabulary_ops,
)
from distrib.framework.op_shapes import ShapeFn, Spec

__all__ = ["OpDef", "register_op", "op_def", "find_op_def", "op_defs", "op_types",
           "set_gradient", "infer", "matmul_flops", "filled_elements"]

GradFn = Callable[..., Any]
# fn(input values, attrs) -> multiply-adds of one run, or None: weigh it by its bytes
CostFn = Callable[[list, dict], "int | None"]


@dataclass(frozen=True, slots=True)
class OpDef:
    """The facts of one op type (docs/ops.md lists them per op)."""

    name: str
    # the inputs' names, in order (docs/ops.md); "name*": any number of
    # tensors (ConcatV2's values), "name?": an optional last input
    inputs: tuple[str, ...] = ()
    # outputs' (dtype, shape) at build time (None: the builder gives them)
    shape_fn: ShapeFn | None = None
    # reads or writes state that outlives the step (the task's variables or
    # resources): the runtime runs it itself, against the task's store
    is_stateful: bool = False
    # on a task resource other than a variable: an accumulator or a queue
    # (distrib.runtime.state.resources runs it; it may wait)
    is_resource: bool = False
    # a collective (distrib.runtime.collective.engine runs it with its group)
    is_collective: bool = False
    # writes the variable named by attr ``var`` (and the slots named by
    # ``slot_attrs``): ordered after the step's reads of it, and in program
    # order in a traced function
    is_update: bool = False
    slot_attrs: tuple[str, ...] = ()
    # a traced function (dt.function) runs it even when nothing fetches it
    has_side_effects: bool = False
    # the executor runs its registry kernel; False: the runtime runs it itself
    # (a feed, a no-op, a send or receive, a stateful op, a collective; an
    # Apply* update then calls its registry kernel for the math)
    runs_kernel: bool = True
    # how heavy a run is, in multiply-adds from its inputs, for the kernel
    # pool (None: weighed by its inputs' bytes, see kernel_pool.weigh)
    heavy: CostFn | None = None
    # its CPU kernel can write its result where attrs["_alloc"] says (the
    # shared-memory arena, when the result only goes to other tasks)
    arena_out: bool = False
    # inputs read only for their shape and dtype (a stand-in replaces them)
    shape_only_inputs: tuple[int, ...] = ()
    # fn(op, *output_grads) -> input grads (written by distrib.ops.gradients)
    gradient: GradFn | None = None
    # declared not differentiable (no_gradient): gradients stop here
    no_gradient: bool = False


_CATALOGUE: dict[str, OpDef] = {}


def register_op(name: str, *, inputs: tuple[str, ...] = (), shape_fn: ShapeFn | None = None,
                is_stateful: bool = False, is_resource: bool = False,
                is_collective: bool = False, is_update: bool = False,
                slot_attrs: tuple[str, ...] = (), has_side_effects: bool | None = None,
                runs_kernel: bool | None = None, heavy: CostFn | None = None,
                arena_out: bool = False, shape_only_inputs: tuple[int, ...] = ()) -> OpDef:
    """Add the entry of op type ``name``. ``has_side_effects`` defaults to
    stateful or collective, ``runs_kernel`` to neither. A second entry of one
    name is an ``AlreadyExistsError``; facts that contradict each other (a
    resource op that is not stateful, say) an ``InvalidArgumentError``."""
    if name in _CATALOGUE:
        raise AlreadyExistsError(f"op type {name!r} is already in the op catalogue")
    stateful_or_collective = is_stateful or is_collective
    entry = OpDef(
        name, inputs=tuple(inputs), shape_fn=shape_fn, is_stateful=is_stateful,
        is_resource=is_resource, is_collective=is_collective, is_update=is_update,
        slot_attrs=tuple(slot_attrs),
        has_side_effects=stateful_or_collective if has_side_effects is None else has_side_effects,
        runs_kernel=not stateful_or_collective if runs_kernel is None else runs_kernel,
        heavy=heavy, arena_out=arena_out, shape_only_inputs=tuple(shape_only_inputs))
    _check(entry)
    _CATALOGUE[name] = entry
    return entry


def _check(d: OpDef) -> None:
    wrong = []
    if (d.is_resource or d.is_update) and not d.is_stateful:
        wrong.append("a resource or update op must be stateful")
    if d.slot_attrs and not d.is_update:
        wrong.append("only an update op has slot_attrs")
    if (d.is_stateful or d.is_collective) and d.runs_kernel:
        wrong.append("the runtime runs stateful and collective ops itself (runs_kernel=False)")
    if any(not 0 <= k < len(d.inputs) for k in d.shape_only_inputs):
        wrong.append(f"shape_only_inputs {d.shape_only_inputs} out of range of {d.inputs}")
    if wrong:
        raise InvalidArgumentError(f"op type {d.name!r}: " + "; ".join(wrong))


def op_def(name: str) -> OpDef:
    """The entry of op type ``name``; ``NotFoundError`` naming it if there is none."""
    entry = _CATALOGUE.get(name)
    if entry is None:
        raise NotFoundError(f"op type {name!r} is not in the op catalogue "
                            "(distrib/framework/op_def.py, listed in docs/ops.md); check its "
                            "spelling, or add it with register_op")
    return entry


def find_op_def(name: str) -> OpDef | None:
    """The entry of op type ``name``, or None (for code that meets graphs
    with op types of their own and reports them itself)."""
    return _CATALOGUE.get(name)


def op_defs() -> Iterator[OpDef]:
    """Every entry, in registration order."""
    return iter(list(_CATALOGUE.values()))


def op_types(where: Callable[[OpDef], bool]) -> frozenset[str]:
    """The op types whose entries satisfy ``where``: for a set the runtime
    tests per op on its hot path, derived once (at import)."""
    return frozenset(d.name for d in _CATALOGUE.values() if where(d))


def set_gradient(name: str, fn: GradFn | None, *, no_gradient: bool = False) -> OpDef:
    """Write op type ``name``'s gradient into its entry (the ops layer's
    ``register_gradient`` and ``no_gradient``); ``fn`` None and
    ``no_gradient`` False: no gradient declared (a lookup then fails)."""
    entry = dataclasses.replace(op_def(name), gradient=fn, no_gradient=no_gradient)
    _CATALOGUE[name] = entry
    return entry


def infer(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """The outputs' (dtype, shape) of op ``name`` of type ``op_type``, by the
    entry's shape function (the builders' static shape inference)."""
    fn = op_def(op_type).shape_fn
    if fn is None:
        raise NotFoundError(f"op type {op_type!r} has no shape function in the op catalogue; "
                            "build it with create_op(..., output_specs=...)", op=name)
    return fn(op_type, name, inputs, attrs)


def filled_elements(args: list, attrs: dict) -> int | None:
    """The elements a source makes from its shape (a table's initializer: 10^7 rows
    must not run on the event loop), weighed as one operation each."""
    shape = attrs.get("shape")
    if args and getattr(args[0], "size", 0):
        shape = [int(d) for d in args[0]]
    if not shape or any(d is None for d in shape):
        return None
    n = 1
    for d in shape:
        n *= int(d)
    return n


def matmul_flops(args: list, attrs: dict) -> int | None:
    """Multiply-adds of ``a @ b``, ``(m x k) @ (k x n)`` whichever operand is
    transposed: m * k * n (None when the inputs are not two matrices)."""
    if len(args) != 2:
        return None
    sa, sb = getattr(args[0], "shape", ()), getattr(args[1], "shape", ())
    if len(sa) != 2 or len(sb) != 2:
        return None
    return sa[0] * sa[1] * (sb[0] if attrs.get("transpose_b") else sb[1])


# -- the entries ----------------------------------------------------------------------
# Grouped as docs/ops.md groups them; an entry per op type, facts beside it.
_X, _XY = ("x",), ("x", "y")

# sources
register_op("Const", shape_fn=op_shapes.const)
register_op("Placeholder", shape_fn=op_shapes.from_attrs, runs_kernel=False)  # a feed
for _t in ("Zeros", "Ones", "RandomStandardNormal"):
    register_op(_t, shape_fn=op_shapes.from_attrs, heavy=filled_elements)
# shape?: the shape as a tensor (dropout of a batch of unknown size), the
# attr then holds what is known of it (TF's RandomUniform takes it as an input)
register_op("RandomUniform", inputs=("shape?",), shape_fn=op_shapes.from_attrs,
            heavy=filled_elements)
register_op("ZerosLike", inputs=_X, shape_fn=op_shapes.unchanged, shape_only_inputs=(0,))
register_op("OnesLike", inputs=_X, shape_fn=op_shapes.unchanged, shape_only_inputs=(0,))
register_op("NoOp", shape_fn=op_shapes.no_outputs, runs_kernel=False)

# elementwise
for _t in ("Add", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "Pow"):
    register_op(_t, inputs=_XY, shape_fn=op_shapes.binary)
for _t in ("Equal", "NotEqual", "Less", "Greater"):
    register_op(_t, inputs=_XY, shape_fn=op_shapes.compare)
register_op("LogicalAnd", inputs=_XY, shape_fn=op_shapes.logical)
register_op("LogicalNot", inputs=_X, shape_fn=op_shapes.logical_not)
for _t in ("Log", "Exp", "Sqrt", "Sigmoid", "Tanh"):
    register_op(_t, inputs=_X, shape_fn=op_shapes.float_unary)
for _t in ("Neg", "Square", "Abs", "Relu", "Sign"):
    register_op(_t, inputs=_X, shape_fn=op_shapes.numeric_unary)
register_op("Floor", inputs=_X, shape_fn=op_shapes.float_unary)   # no gradient (TF's)
register_op("Identity", inputs=_X, shape_fn=op_shapes.unchanged)
register_op("StopGradient", inputs=_X, shape_fn=op_shapes.unchanged)
register_op("Cast", inputs=_X, shape_fn=op_shapes.cast)
register_op("ReluGrad", inputs=("dy", "y"), shape_fn=op_shapes.activation_grad)
register_op("SigmoidGrad", inputs=("y", "dy"), shape_fn=op_shapes.activation_grad)
register_op("TanhGrad", inputs=("y", "dy"), shape_fn=op_shapes.activation_grad)

# linear algebra / nn
register_op("MatMul", inputs=("a", "b"), shape_fn=op_shapes.matmul, heavy=matmul_flops,
            arena_out=True)
register_op("BiasAdd", inputs=("value", "bias"), shape_fn=op_shapes.bias_add)
register_op("BiasAddGrad", inputs=("dy",), shape_fn=op_shapes.bias_add_grad)
# Relu(Add/BiasAdd(x, b)) on a GPU, fused by the worker into one kernel (kernels.cuda.fusion)
register_op("_FusedBiasRelu", inputs=("x", "bias"))
register_op("Softmax", inputs=("logits",), shape_fn=op_shapes.float_unary)
register_op("LogSoftmax", inputs=("logits",), shape_fn=op_shapes.float_unary)
register_op("SoftmaxCrossEntropyWithLogits", inputs=("logits", "labels"),
            shape_fn=op_shapes.cross_entropy)
register_op("SparseSoftmaxCrossEntropyWithLogits", inputs=("logits", "labels"),
            shape_fn=op_shapes.cross_entropy)

# convolution, pooling, normalization and top-k (TF's names, input order and
# attrs; shapes and costs in distrib.framework.conv_shapes and nn_shapes)
register_op("Conv2D", inputs=("input", "filter"), shape_fn=conv_shapes.conv2d,
            heavy=conv_shapes.conv2d_flops)
register_op("Conv2DBackpropInput", inputs=("input_sizes", "filter", "out_backprop"),
            shape_fn=conv_shapes.conv2d_backprop_input, heavy=conv_shapes.conv2d_backprop_flops)
register_op("Conv2DBackpropFilter", inputs=("input", "filter_sizes", "out_backprop"),
            shape_fn=conv_shapes.conv2d_backprop_filter, heavy=conv_shapes.conv2d_backprop_flops)
register_op("DepthwiseConv2dNative", inputs=("input", "filter"),
            shape_fn=conv_shapes.depthwise_conv2d, heavy=conv_shapes.depthwise_flops)
register_op("DepthwiseConv2dNativeBackpropInput",
            inputs=("input_sizes", "filter", "out_backprop"),
            shape_fn=conv_shapes.conv2d_backprop_input, heavy=conv_shapes.conv2d_backprop_flops)
register_op("DepthwiseConv2dNativeBackpropFilter",
            inputs=("input", "filter_sizes", "out_backprop"),
            shape_fn=conv_shapes.conv2d_backprop_filter, heavy=conv_shapes.conv2d_backprop_flops)
register_op("MaxPool", inputs=("input",), shape_fn=conv_shapes.pool)
register_op("AvgPool", inputs=("value",), shape_fn=conv_shapes.pool)
register_op("MaxPoolGrad", inputs=("orig_input", "orig_output", "grad"),
            shape_fn=conv_shapes.max_pool_grad)
register_op("AvgPoolGrad", inputs=("orig_input_shape", "grad"), shape_fn=conv_shapes.avg_pool_grad)
register_op("LRN", inputs=("input",), shape_fn=nn_shapes.lrn)
register_op("LRNGrad", inputs=("input_grads", "input_image", "output_image"),
            shape_fn=nn_shapes.lrn_grad)
register_op("FusedBatchNormV3", inputs=("x", "scale", "offset", "mean", "variance"),
            shape_fn=nn_shapes.fused_batch_norm)
register_op("FusedBatchNormGradV3", inputs=("y_backprop", "x", "scale", "reserve_space_1",
                                            "reserve_space_2", "reserve_space_3"),
            shape_fn=nn_shapes.fused_batch_norm_grad)
register_op("TopKV2", inputs=("input", "k"), shape_fn=nn_shapes.top_k)
register_op("InTopKV2", inputs=("predictions", "targets", "k"), shape_fn=nn_shapes.in_top_k)

# reductions
for _t in ("Sum", "Mean", "Min", "Max", "Prod"):
    register_op(_t, inputs=_X, shape_fn=op_shapes.reduction)
register_op("ArgMax", inputs=_X, shape_fn=op_shapes.argmax)

# shape
register_op("Reshape", inputs=("x", "shape?"), shape_fn=op_shapes.reshape)
register_op("Transpose", inputs=_X, shape_fn=op_shapes.transpose)
register_op("Shape", inputs=_X, shape_fn=op_shapes.shape_vector, shape_only_inputs=(0,))
register_op("SumToShapeOf", inputs=("grad", "ref"), shape_fn=op_shapes.to_shape_of,
            shape_only_inputs=(1,))
register_op("BroadcastToShapeOf", inputs=("grad", "ref"), shape_fn=op_shapes.to_shape_of,
            shape_only_inputs=(1,))
register_op("Tile", inputs=("x", "multiples?"))
register_op("ExpandDims", inputs=("x", "axis?"))
register_op("ConcatV2", inputs=("values*",), shape_fn=op_shapes.concat)
register_op("SliceAxis", inputs=_X, shape_fn=op_shapes.slice_axis)
# cutting, padding, reversing, choosing (TF's ops; shapes in slicing_shapes): dt.strided_slice,
# dt.slice, dt.pad, dt.reverse, dt.where and the dt.image functions built of them
register_op("StridedSlice", inputs=("input",), shape_fn=slicing_shapes.strided_slice)
register_op("StridedSliceGrad", inputs=("dy", "input"), shape_fn=slicing_shapes.strided_slice_grad,
            shape_only_inputs=(1,))
register_op("Slice", inputs=("input", "begin?"), shape_fn=slicing_shapes.slice_)
register_op("Pad", inputs=("input", "paddings?"), shape_fn=slicing_shapes.pad)
register_op("ReverseV2", inputs=("tensor",), shape_fn=op_shapes.unchanged)
register_op("SelectV2", inputs=("condition", "t", "e"), shape_fn=slicing_shapes.select_v2)
register_op("AdjustContrastv2", inputs=("images", "contrast_factor"),
            shape_fn=op_shapes.unchanged)
register_op("DecodeRaw", inputs=("bytes",), shape_fn=slicing_shapes.decode_raw)
register_op("RandomShuffle", inputs=("value",), shape_fn=op_shapes.unchanged)

# variables and their updates (distrib.runtime.state.stateful)
register_op("VariableV2", is_stateful=True, has_side_effects=False)   # a read
register_op("IsVariableInitialized", is_stateful=True, has_side_effects=False)
register_op("Assign", inputs=("value",), is_stateful=True, is_update=True)
register_op("AssignAdd", inputs=("delta",), is_stateful=True, is_update=True)
register_op("AssignSub", inputs=("delta",), is_stateful=True, is_update=True)
register_op("ApplyGradientDescent", inputs=("lr", "grad"), is_stateful=True, is_update=True)
register_op("ApplyMomentum", inputs=("lr", "grad", "momentum"), is_stateful=True,
            is_update=True, slot_attrs=("accum",))
register_op("ApplyAdagrad", inputs=("lr", "grad"), is_stateful=True, is_update=True,
            slot_attrs=("accum",))
register_op("ApplyAdam", inputs=("beta1_power", "beta2_power", "lr", "beta1", "beta2",
                                 "epsilon", "grad"),
            is_stateful=True, is_update=True, slot_attrs=("m", "v"))
register_op("ApplyRMSProp", inputs=("lr", "rho", "momentum", "epsilon", "grad"),
            is_stateful=True, is_update=True, slot_attrs=("ms", "mom"))
register_op("ApplyCenteredRMSProp", inputs=("lr", "rho", "momentum", "epsilon", "grad"),
            is_stateful=True, is_update=True, slot_attrs=("mg", "ms", "mom"))

# accumulators and queues (distrib.runtime.state.resources)
register_op("AccumulatorApplyGradient", inputs=("local_step", "grad"), is_stateful=True,
            is_resource=True)
register_op("AccumulatorTakeGradient", inputs=("num_required",), is_stateful=True,
            is_resource=True)
register_op("AccumulatorSetGlobalStep", inputs=("new_step",), is_stateful=True,
            is_resource=True)
register_op("AccumulatorNumAccumulated", is_stateful=True, is_resource=True,
            has_side_effects=False)
register_op("QueueEnqueueMany", inputs=("values",), is_stateful=True, is_resource=True)
register_op("QueueDequeue", is_stateful=True, is_resource=True)
register_op("QueueSize", is_stateful=True, is_resource=True, has_side_effects=False)
register_op("QueueClose", is_stateful=True, is_resource=True)
# TF1's input queues and readers (distrib.runtime.state.input_queues, readers): attrs
# `queue` (shared name) and `spec` (its kind, component types and shapes, capacity ...);
# the builders give the outputs (distrib.ops.data_flow_ops, io_ops)
register_op("FIFOQueueV2", is_stateful=True, is_resource=True, has_side_effects=False)
register_op("RandomShuffleQueueV2", is_stateful=True, is_resource=True, has_side_effects=False)
register_op("QueueEnqueueV2", inputs=("components*",), is_stateful=True, is_resource=True)
register_op("QueueEnqueueManyV2", inputs=("components*",), is_stateful=True, is_resource=True)
register_op("QueueDequeueV2", is_stateful=True, is_resource=True)
register_op("QueueDequeueManyV2", inputs=("n",), is_stateful=True, is_resource=True)
register_op("QueueDequeueUpToV2", inputs=("n",), is_stateful=True, is_resource=True)
register_op("QueueSizeV2", is_stateful=True, is_resource=True, has_side_effects=False)
register_op("QueueCloseV2", is_stateful=True, is_resource=True)
register_op("ReaderReadV2", is_stateful=True, is_resource=True)
register_op("ReaderReadUpToV2", inputs=("num_records",), is_stateful=True, is_resource=True)
# a Slice with a begin per row of a batch, a SelectV2 with a condition per row (a
# vectorized queue runner's random crop and flip: distrib.train.input.vectorize;
# kernels/cpu/batch_rows.py)
register_op("BatchSlice", inputs=("input", "begin"))
register_op("BatchSelect", inputs=("condition", "t", "e"))
# a variable counted up to a limit (OutOfRangeError there): input producers' epochs
register_op("CountUpTo", is_stateful=True, is_update=True)

# collectives (distrib.runtime.collective.engine)
for _t in ("CollectiveReduce", "CollectiveGather", "CollectiveBcastSend"):
    register_op(_t, inputs=("t",), is_collective=True)
register_op("CollectiveBcastRecv", is_collective=True)

# summaries: a serialized Summary (a string scalar), computed on the task that owns
# the input (distrib.summary.summary_ops holds the kernels and the builders)
for _t in ("ScalarSummary", "HistogramSummary", "ImageSummary", "TextSummary"):
    register_op(_t, inputs=("values",), shape_fn=op_shapes.string_scalar)
register_op("MergeSummary", inputs=("inputs*",), shape_fn=op_shapes.string_scalar)

# a chain of elementwise ops fused by the master's graph optimizer into one CPU
# kernel (distrib.runtime.step.graph_optimizer, kernels.cpu.fused)
register_op("_FusedElementwise", inputs=("inputs*",))

# cross-task edges, inserted by the master's partitioner (distrib.runtime.step.plan)
register_op("_Send", inputs=_X, runs_kernel=False)
register_op("_Recv", runs_kernel=False)

# gathering, scattering and segmenting: the embeddings' ops (TF's names and inputs; shapes
# in gather_shapes, kernels in kernels/cpu/gather.py and sparse_update.py, builders in
# distrib.ops.array_gather); axis and batch_dims are attrs, as ConcatV2's axis
# weighed by the rows they copy, not the table they read: a batch's rows of a 10^7-row
# table stay on the event loop, so no pool thread holds the table while an update of
# another replica's step wants to write it (that would copy the whole table)
register_op("GatherV2", inputs=("params", "indices"), shape_fn=gather_shapes.gather,
            heavy=gather_shapes.gathered_elements)
# the rows of a variable (attr var), read from the store when it runs, beside it: its input
# 0 (the variable's VariableV2 output, what the gradient reaches) is read for its shape only,
# so a step waiting for its ids holds no reference to the table (an update of another
# replica's step would then copy the whole table)
register_op("ResourceGather", inputs=("resource", "indices"),
            shape_fn=gather_shapes.resource_gather, is_stateful=True, has_side_effects=False,
            shape_only_inputs=(0,))
register_op("UnsortedSegmentSum", inputs=("data", "segment_ids", "num_segments"),
            shape_fn=gather_shapes.unsorted_segment)
for _t in ("SegmentSum", "SegmentMean"):
    register_op(_t, inputs=("data", "segment_ids"), shape_fn=gather_shapes.segment)
register_op("DynamicPartition", inputs=("data", "partitions"),
            shape_fn=gather_shapes.dynamic_partition)
register_op("DynamicStitch", inputs=("indices_then_data*",), shape_fn=gather_shapes.dynamic_stitch)
register_op("Unique", inputs=("x",), shape_fn=gather_shapes.unique)
register_op("SparseToDense", inputs=("sparse_indices", "output_shape", "sparse_values",
                                     "default_value"), shape_fn=gather_shapes.sparse_to_dense)
# sparse updates of a variable (attr var): rows written where the variable lives
for _t in ("ScatterAdd", "ScatterSub", "ScatterUpdate"):
    register_op(_t, inputs=("indices", "updates"), shape_fn=gather_shapes.scatter,
                is_stateful=True, is_update=True)
register_op("ScatterNdUpdate", inputs=("indices", "updates"), shape_fn=gather_shapes.scatter_nd,
            is_stateful=True, is_update=True)
register_op("SparseApplyMomentum", inputs=("lr", "grad", "indices", "momentum"),
            is_stateful=True, is_update=True, slot_attrs=("accum",))
register_op("SparseApplyAdagrad", inputs=("lr", "grad", "indices"), is_stateful=True,
            is_update=True, slot_attrs=("accum",))
register_op("SparseApplyRMSProp", inputs=("lr", "rho", "momentum", "epsilon", "grad", "indices"),
            is_stateful=True, is_update=True, slot_attrs=("ms", "mom"))
register_op("SparseApplyCenteredRMSProp",
            inputs=("lr", "rho", "momentum", "epsilon", "grad", "indices"),
            is_stateful=True, is_update=True, slot_attrs=("mg", "ms", "mom"))
register_op("SparseApplyFtrl", inputs=("grad", "indices", "lr", "l1", "l2", "lr_power"),
            is_stateful=True, is_update=True, slot_attrs=("accum", "linear"))
register_op("SparseApplyFtrlV2",
            inputs=("grad", "indices", "lr", "l1", "l2", "l2_shrinkage", "lr_power"),
            is_stateful=True, is_update=True, slot_attrs=("accum", "linear"))
# sync replicas' sparse gradients, kept as rows (distrib.runtime.state.sparse_accumulator)
register_op("SparseAccumulatorApplyGradient", inputs=("local_step", "indices", "values"),
            is_stateful=True, is_resource=True)
register_op("SparseAccumulatorTakeGradient", inputs=("num_required",), is_stateful=True,
            is_resource=True)
# the lookup layers' (kernels/cpu/hashing.py): FarmHash buckets, a static table (attrs
# table_keys, table_values, value_dtype: TF's table handle input is the table itself here)
register_op("StringToHashBucketFast", inputs=("input",), shape_fn=gather_shapes.hash_bucket)
register_op("LookupTableFindV2", inputs=("keys", "default_value"),
            shape_fn=gather_shapes.table_find)
register_op("DenseBincount", inputs=("input", "size", "weights?"),
            shape_fn=gather_shapes.dense_bincount)

# reading input: parsing Examples, files, image decoding, resizing and colour (shapes and the
# entries' keywords in io_shapes.OPS; kernels in kernels/cpu/parsing.py, image_codec.py and
# image_resize.py; builders in distrib.ops.parsing_ops and image_ops)
for _t, _kw in io_shapes.OPS.items():
    register_op(_t, **_kw)

# TF's everyday vocabulary (issue 39): tf.math, the activations, stacking and splitting,
# one_hot, range, the remaining TF1 optimizers' updates (entries in vocabulary_ops.ENTRIES)
for _kw in vocabulary_ops.ENTRIES:
    register_op(**_kw)

# the bounding-box crop of ImageNet preprocessing (issue 40): ExtractJpegShape, the
# distorted-box samplers, DecodeAndCropJpeg, BroadcastTo (image_box_shapes.ENTRIES)
from distrib.framework import image_box_shapes  # noqa: E402 - appended family

for _kw in image_box_shapes.ENTRIES:
    register_op(**_kw)

# TF's everyday names real TF2 programs call (issue 39's remainder): py_function, fill,
# linspace, roll, print, the asserts, gather_nd/scatter_nd, einsum, inverse and determinant,
# depth_to_space, searchsorted (names_shapes.ENTRIES)
from distrib.framework import names_shapes  # noqa: E402 - appended family

for _kw in names_shapes.ENTRIES:
    register_op(**_kw)
