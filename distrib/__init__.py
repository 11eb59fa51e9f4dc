"""distrib: a distributed tensor runtime in the model of distributed TensorFlow.

    import distrib as dt
    server = dt.Server.create_local_server()
    sess = dt.SyncSession(server.target)
    sess.run(dt.constant("Hello, distributed world!"))

The package namespace only re-exports (and makes the process runtime,
``distrib/process.py``, once); each idea lives in a module of its
subpackage (docs/ARCHITECTURE.md): ``errors``, ``cluster`` (ClusterSpec,
TF_CONFIG), ``framework`` (the graph's data model),
``ops`` (op builders, nn, variables, gradients), ``client`` (sessions),
``runtime`` (the task's services), ``server``, ``train`` (``dt.train``),
``app`` (``dt.app``: TF1's ``tf.app.flags`` and ``tf.app.run``).
Names follow ``tf.compat.v1``; ``bool``, ``abs`` and ``pow`` shadow builtins
only inside the ``dt`` namespace, as in TF.
"""
from __future__ import annotations

from distrib import client, data, errors, io, process, summary
from distrib.client.graph_options import GraphOptions, OptimizerOptions, RewriterConfig
from distrib.client.run_metadata import RunMetadata, RunOptions
from distrib.client.session import ConfigProto, GPUOptions, Session, SyncSession
from distrib.cluster import ClusterSpec
from distrib.data.structure import TensorSpec
from distrib.eager import EagerTensor, enable_eager_execution, executing_eagerly  # eager values (issue 39)
from distrib.framework import config, dtypes
from distrib.framework.device import DeviceSpec
from distrib.framework.dtypes import (
    DType,
    as_dtype,
    bool,
    complex64,
    complex128,
    double,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    string,
    uint8,
    uint16,
    uint32,
    uint64,
)
from distrib.framework.graph import (
    Graph,
    GraphKeys,
    Operation,
    Tensor,
    add_to_collection,
    add_to_collections,
    colocate_with,
    control_dependencies,
    device,
    get_collection,
    get_collection_ref,
    get_default_graph,
    name_scope,
    reset_default_graph,
)
from distrib.framework.graph_def import import_graph_def
from distrib.framework.sparse_tensor import SparseTensor, SparseTensorValue
from distrib.framework.tensor_shape import Dimension, TensorShape, dimension_value
from distrib.ops import collective_ops as collective
from distrib.ops import (
    debugging,  # the everyday vocabulary (issue 39)
    io_names,
    nn,
)
from distrib.ops import embedding_ops as _embedding_ops
from distrib.ops import image_ops as image
from distrib.ops import losses_impl as losses
from distrib.ops import math_namespace as math
from distrib.ops import random_ops as random
from distrib.ops.array_extra_ops import (
    boolean_mask,
    clip_by_value,
    one_hot,
    range,
    split,
    squeeze,
    stack,
    tile,
    unstack,
    where,
)
from distrib.ops.array_gather import (  # embeddings' ops (issue 41)
    assign,
    assign_add,
    assign_sub,
    dynamic_partition,
    dynamic_stitch,
    gather,
    scatter_add,
    scatter_nd_update,
    scatter_sub,
    scatter_update,
    segment_mean,
    segment_sum,
    sparse_to_dense,
    unique,
    unsorted_segment_sum,
)
from distrib.ops.array_ops import concat, expand_dims
from distrib.ops.backprop import GradientTape
from distrib.ops.clip_ops import clip_by_average_norm, clip_by_global_norm, clip_by_norm, global_norm
from distrib.ops.data_flow_ops import FIFOQueue, QueueBase, RandomShuffleQueue
from distrib.ops.debugging import add_check_numerics_ops
from distrib.ops.gradients import NotDifferentiable, gradients, no_gradient, register_gradient
from distrib.ops.image_ops import random_crop
from distrib.ops.indexed_slices import IndexedSlices, IndexedSlicesValue, convert_to_tensor_or_indexed_slices
from distrib.ops.init_ops import (
    constant_initializer,
    glorot_normal_initializer,
    glorot_uniform_initializer,
    ones_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    truncated_normal_initializer,
    variance_scaling_initializer,
    zeros_initializer,
)
from distrib.ops.io_ops import (
    FixedLengthRecordReader,
    ReaderBase,
    TFRecordReader,
    WholeFileReader,
    decode_raw,
)
from distrib.ops.math_extra_ops import check_numerics, floor_div, verify_tensor_all_finite
from distrib.ops.math_ops import (
    abs,
    add,
    add_n,
    argmax,
    cast,
    constant,
    convert_to_tensor,
    divide,
    equal,
    exp,
    greater,
    greater_equal,
    group,
    identity,
    is_tensor,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    matmul,
    maximum,
    minimum,
    multiply,
    negative,
    no_op,
    not_equal,
    ones,
    ones_like,
    placeholder,
    pow,
    random_normal,
    random_uniform,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    reshape,
    set_random_seed,
    shape,
    sigmoid,
    sign,
    sqrt,
    square,
    stop_gradient,
    subtract,
    tanh,
    transpose,
    truediv,
    zeros,
    zeros_like,
)
from distrib.ops.partitioned_variables import (  # TF1's partitioned variables (issue 41)
    PartitionedVariable,
    fixed_size_partitioner,
    min_max_variable_partitioner,
    variable_axis_size_partitioner,
)
from distrib.ops.random_ops import multinomial, random_shuffle, truncated_normal
from distrib.ops.slicing_ops import pad, reverse, reverse_v2, slice, strided_slice
from distrib.ops.tensor_indexing import newaxis
from distrib.ops.variable_scope import (
    AUTO_REUSE,
    VariableScope,
    get_local_variable,
    get_variable,
    get_variable_scope,
    no_regularizer,
    variable_scope,
)
from distrib.ops.variables import (
    Variable,
    VariableAggregation,
    VariableSynchronization,
    global_variables,
    global_variables_initializer,
    initialize_all_variables,
    is_variable_initialized,
    local_variables,
    local_variables_initializer,
    trainable_variables,
    variables_initializer,
)
from distrib.server import Server, serve

# dt.io.decode_raw (TF2's tf.io.decode_raw): the io layer sits below the ops, so the
# one namespace above both puts the op builder there
io.decode_raw = decode_raw
for _name, _builder in io_names.names().items():   # parse_single_example, decode_jpeg ...
    setattr(io, _name, _builder)

# tf.math's names TF1 also has at the top level (dt.log1p is dt.math.log1p)
globals().update({_name: getattr(math, _name) for _name in math.TOP_LEVEL})

# dt.nn's embedding lookups (TF's embedding_ops; issue 41)
for _name in ("embedding_lookup", "embedding_lookup_sparse", "safe_embedding_lookup_sparse"):
    setattr(nn, _name, getattr(_embedding_ops, _name))

# the graph part of the contract (docs/CONTRACT.md), as tf.compat.v1 names it
_graph_all = [
    "TensorSpec", "collective", "concat", "image", "FIFOQueue", "QueueBase", "RandomShuffleQueue",
    "random_crop", "FixedLengthRecordReader", "ReaderBase", "decode_raw", "TFRecordReader",
    "WholeFileReader", "SparseTensor", "SparseTensorValue", "pad", "reverse",
    "reverse_v2", "slice", "strided_slice", "where", "expand_dims", "GradientTape", "nn", "DeviceSpec", "DType", "as_dtype", "bool", "float16", "float32", "float64", "int8",
    "int16", "int32", "int64", "string", "uint8", "NotDifferentiable", "gradients",
    "no_gradient", "register_gradient", "Graph", "GraphKeys", "Operation", "Tensor",
    "add_to_collection", "add_to_collections", "colocate_with", "control_dependencies",
    "device", "get_collection", "get_collection_ref", "get_default_graph", "name_scope",
    "reset_default_graph", "import_graph_def", "abs", "add", "add_n", "argmax", "cast",
    "constant", "convert_to_tensor", "divide", "equal", "exp", "greater", "greater_equal",
    "group", "identity", "is_tensor", "less", "less_equal", "log", "logical_and",
    "logical_not", "logical_or", "matmul", "maximum", "minimum", "multiply", "negative",
    "no_op", "not_equal", "ones", "ones_like", "placeholder", "pow", "random_normal",
    "random_uniform", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum",
    "reshape", "set_random_seed", "shape", "sigmoid", "sign", "sqrt", "square", "stop_gradient", "subtract",
    "tanh", "transpose", "truediv", "zeros", "zeros_like", "TensorShape", "Dimension", "dimension_value", "Variable", "VariableAggregation", "VariableSynchronization",
    "global_variables", "global_variables_initializer", "initialize_all_variables",
    "is_variable_initialized", "local_variables", "local_variables_initializer",
    "trainable_variables", "variables_initializer",
    # TF1's variable sharing and initializer objects (tf.compat.v1 names)
    "AUTO_REUSE", "VariableScope", "get_local_variable", "get_variable", "get_variable_scope",
    "no_regularizer", "variable_scope", "constant_initializer", "glorot_normal_initializer",
    "glorot_uniform_initializer", "ones_initializer", "random_normal_initializer",
    "random_uniform_initializer", "truncated_normal_initializer",
    "variance_scaling_initializer", "zeros_initializer",
    # gathers, scatters, segments and sparse gradients (issue 41)
    "assign", "assign_add", "assign_sub",
    "dynamic_partition", "dynamic_stitch", "gather", "scatter_add", "scatter_nd_update",
    "scatter_sub", "scatter_update", "segment_mean", "segment_sum", "sparse_to_dense", "unique",
    "unsorted_segment_sum", "IndexedSlices", "IndexedSlicesValue",
    "convert_to_tensor_or_indexed_slices", "PartitionedVariable", "fixed_size_partitioner",
    "min_max_variable_partitioner", "variable_axis_size_partitioner",
    # eager values (issue 39)
    "EagerTensor", "enable_eager_execution", "executing_eagerly",
    # the everyday vocabulary (issue 39): tf.math's names at the top level, as TF1's
    "debugging", "math", "random", "dtypes", "boolean_mask", "clip_by_value", "one_hot", "range",
    "split", "squeeze", "stack", "tile", "unstack", "where", "clip_by_average_norm",
    "clip_by_global_norm", "clip_by_norm", "global_norm", "add_check_numerics_ops",
    "check_numerics", "floor_div", "verify_tensor_all_finite", *math.TOP_LEVEL,
    "multinomial", "random_shuffle", "truncated_normal", "newaxis", "complex64", "complex128",
    "double", "half", "uint16", "uint32", "uint64", "losses", "layers", "compat",
]

# tf.broadcast_to (issue 40: ResNet's ImageNet preprocessing subtracts its means so)
from distrib.ops.broadcast_ops import broadcast_to  # noqa: E402

_graph_all += ["broadcast_to"]

# TF's everyday names real TF2 programs call (issue 39's remainder): py_function, fill,
# print, the asserts, sort, gather_nd, einsum, linalg ...
from distrib.ops import asserts as _asserts  # noqa: E402
from distrib.ops import everyday_ops as _everyday  # noqa: E402
from distrib.ops import linalg_namespace as linalg  # noqa: E402
from distrib.ops import linalg_ops as _linalg_ops  # noqa: E402
from distrib.ops import nd_ops as _nd_ops  # noqa: E402
from distrib.ops import py_func_ops as _py_func_ops  # noqa: E402

_ASSERTS = ("assert_equal", "assert_greater", "assert_less", "assert_rank",
            "assert_non_negative", "assert_positive", "assert_greater_equal", "assert_less_equal",
            "assert_none_equal", "assert_negative", "assert_non_positive", "Assert")
_EVERYDAY = {**{n: getattr(_py_func_ops, n) for n in ("py_function", "numpy_function",
                                                      "py_func")},
             **{n: getattr(_everyday, n) for n in (
                 "fill", "size", "rank", "linspace", "lin_space", "eye", "sequence_mask",
                 "roll", "meshgrid", "sort", "argsort", "searchsorted", "depth_to_space",
                 "space_to_depth")},
             **{n: getattr(_nd_ops, n) for n in (
                 "gather_nd", "scatter_nd", "tensor_scatter_nd_update", "tensor_scatter_nd_add",
                 "tensor_scatter_nd_sub")},
             **{n: getattr(_linalg_ops, n) for n in ("einsum", "tensordot", "norm",
                                                     "matrix_inverse", "matrix_determinant")},
             **{n: getattr(_asserts, n) for n in _ASSERTS}, "print": _asserts.print_v2}
globals().update(_EVERYDAY)
for _name in _ASSERTS:
    setattr(debugging, _name, getattr(_asserts, _name))
for _name in ("conv1d", "depth_to_space", "space_to_depth"):
    setattr(nn, _name, getattr(_everyday, _name))
_graph_all += ["linalg", *_EVERYDAY]

# the seeds' spelling (TF 0.x) of tf.summary.merge_all: a Supervisor's summary_op
merge_all_summaries = summary.merge_all

__version__ = "0.1.0"

_LAZY_MODULES = {"layers": "distrib.keras.legacy_tf_layers", "compat": "distrib.compat"}


def __getattr__(name: str):
    # TF1's dt.layers (on the Keras layers: loaded on first use), dt.compat (issue 39)
    if name in _LAZY_MODULES:
        import importlib
        mod = importlib.import_module(_LAZY_MODULES[name])
        globals()[name] = mod
        return mod
    # dt.train loads on first use: it pulls in the optimizers, Saver and Supervisor
    if name in ("train", "distribute", "keras", "app", "io"):   # dt.app: TF1's tf.app
        import importlib
        mod = importlib.import_module(f"distrib.{name}")
        if name == "train":   # dt.train.Checkpoint runs its steps as dt.functions
            importlib.import_module("distrib.distribute")
        globals()[name] = mod
        return mod
    if name == "Summary":   # TF1's tf.Summary: the event files' message (summary/proto.py)
        from distrib.summary import proto
        return proto.messages().Summary
    if name == "gfile":   # TF1's tf.gfile: dt.io.gfile, with its capitalized names
        import importlib
        mod = importlib.import_module("distrib.io.gfile")
        globals()[name] = mod
        return mod
    if name == "function":   # dt.function: the strategies' package, on first use
        import importlib
        fn = importlib.import_module("distrib.distribute").function
        globals()["function"] = fn
        return fn
    raise AttributeError(f"module 'distrib' has no attribute {name!r}")


# The package's one statement that is not a definition: the process runtime makes
# the registrations between layers and owns the client actor system (distrib/process.py).
process.runtime()

__all__ = ["errors", "config", "data", "distribute", "function", "summary", "merge_all_summaries",
           "ClusterSpec", "Server",
           "serve", "ConfigProto", "GPUOptions", "GraphOptions", "OptimizerOptions",
           "RewriterConfig", "Session", "SyncSession", "train", "app", "io", "gfile", "Summary",
           "client", "RunOptions", "RunMetadata",
           *_graph_all]
