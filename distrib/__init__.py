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
from distrib.framework import config
from distrib.framework.device import DeviceSpec
from distrib.framework.dtypes import (
    DType,
    as_dtype,
    bool,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    string,
    uint8,
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
from distrib.framework.tensor_shape import Dimension, TensorShape, dimension_value
from distrib.ops import collective_ops as collective
from distrib.ops import image_ops as image
from distrib.ops import nn
from distrib.ops.array_ops import concat, expand_dims
from distrib.ops.backprop import GradientTape
from distrib.ops.data_flow_ops import FIFOQueue, QueueBase, RandomShuffleQueue
from distrib.ops.gradients import NotDifferentiable, gradients, no_gradient, register_gradient
from distrib.ops.image_ops import random_crop
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
from distrib.ops.io_ops import FixedLengthRecordReader, ReaderBase, decode_raw
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
from distrib.ops.slicing_ops import pad, reverse, reverse_v2, slice, strided_slice, where
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

# the graph part of the contract (docs/CONTRACT.md), as tf.compat.v1 names it
_graph_all = [
    "TensorSpec", "collective", "concat", "image", "FIFOQueue", "QueueBase", "RandomShuffleQueue",
    "random_crop", "FixedLengthRecordReader", "ReaderBase", "decode_raw", "pad", "reverse",
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
]

# the seeds' spelling (TF 0.x) of tf.summary.merge_all: a Supervisor's summary_op
merge_all_summaries = summary.merge_all

__version__ = "0.1.0"


def __getattr__(name: str):
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
