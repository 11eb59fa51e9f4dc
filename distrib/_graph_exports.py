"""The public names of the graph layer, for ``distrib/__init__.py`` to re-export.

``from distrib._graph_exports import *`` gives ``dt.constant``, ``dt.Graph``,
``dt.Variable``, ``dt.gradients``, ``dt.nn`` ... (the graph part of the
contract in DESIGN.md). Names follow ``tf.compat.v1``; ``bool``, ``abs`` and
``pow`` shadow builtins only inside the ``dt`` namespace, as in TF.
"""
from __future__ import annotations

from distrib import nn
from distrib.device import DeviceSpec
from distrib.dtypes import (DType, as_dtype, bool, float16, float32, float64, int8, int16,
                            int32, int64, string, uint8)
from distrib.gradients import NotDifferentiable, gradients, no_gradient, register_gradient
from distrib.graph import (Graph, GraphKeys, Operation, Tensor, add_to_collection,
                           add_to_collections, colocate_with, control_dependencies, device,
                           get_collection, get_collection_ref, get_default_graph, name_scope,
                           reset_default_graph)
from distrib.graph_def import import_graph_def
from distrib.ops import (abs, add, add_n, argmax, cast, constant, convert_to_tensor, divide,
                         equal, exp, greater, greater_equal, group, identity, is_tensor, less,
                         less_equal, log, logical_and, logical_not, logical_or, matmul, maximum,
                         minimum, multiply, negative, no_op, not_equal, ones, ones_like,
                         placeholder, pow, random_normal, random_uniform, reduce_max, reduce_mean,
                         reduce_min, reduce_prod, reduce_sum, reshape, set_random_seed, shape,
                         sigmoid, sign, sqrt, square, subtract, tanh, transpose, truediv, zeros,
                         zeros_like)
from distrib.tensor_shape import TensorShape
from distrib.variables import (Variable, global_variables, global_variables_initializer,
                               initialize_all_variables, is_variable_initialized,
                               local_variables, local_variables_initializer, trainable_variables,
                               variables_initializer)

__all__ = [
    "nn", "DeviceSpec", "DType", "as_dtype", "bool", "float16", "float32", "float64", "int8",
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
    "reshape", "set_random_seed", "shape", "sigmoid", "sign", "sqrt", "square", "subtract",
    "tanh", "transpose", "truediv", "zeros", "zeros_like", "TensorShape", "Variable",
    "global_variables", "global_variables_initializer", "initialize_all_variables",
    "is_variable_initialized", "local_variables", "local_variables_initializer",
    "trainable_variables", "variables_initializer",
]
