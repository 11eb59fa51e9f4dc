"""One op's own gradient, in place of its type's: graph-mode ``custom_gradient``.

TF builds a ``tf.custom_gradient`` in a graph as an ``IdentityN`` over the
function's outputs and inputs with a gradient override: the gradient walk
meets the identity, calls the user's gradient function for the inputs, and
never goes into the computation that made the outputs. This table does the
same without a new op type: an entry says "differentiate through ``op`` (an
``Identity`` of a value computed some other way) as if its inputs were
``inputs``, with ``fn(op, *output_grads)`` giving their gradients". The
runtime is not involved: the op runs as the plain ``Identity`` it is.

The first user is ``ReplicaContext.all_reduce``, whose gradient must be the
all-reduce of the replicas' upstream gradients (TF's), which is a collective
built at gradient time; ``when`` says at gradient time whether the entry
holds (an all-reduce differentiated outside its ``strategy.run``, where no
replica can meet the others, takes the ordinary path through the graph).

Entries live in a collection of their graph (``CUSTOM_GRADIENTS``), so they go
with it (a table keyed by graph would keep every graph alive through its
entries' tensors).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from distrib.framework.graph import Operation, Tensor

__all__ = ["CUSTOM_GRADIENTS", "CustomGradient", "set_custom_gradient", "custom_gradients"]


@dataclasses.dataclass(frozen=True)
class CustomGradient:
    """``op``'s gradient: ``fn(op, *output_grads)`` -> one gradient per ``inputs``."""
    inputs: tuple[Tensor, ...]
    fn: Callable[..., Sequence[Any]]
    when: Callable[[], bool] | None = None

    def holds(self) -> bool:
        return self.when is None or bool(self.when())


CUSTOM_GRADIENTS = "__custom_gradients__"   # the graph collection of (op, CustomGradient)


def set_custom_gradient(op: Operation, inputs: Sequence[Tensor],
                        fn: Callable[..., Sequence[Any]],
                        when: Callable[[], bool] | None = None) -> None:
    """Differentiate through ``op`` as if its inputs were ``inputs``, by ``fn``
    (see the module header); ``when``: a test made at gradient time."""
    op.graph.add_to_collection(CUSTOM_GRADIENTS, (op, CustomGradient(tuple(inputs), fn, when)))


def custom_gradients(graph: Any) -> dict[Operation, CustomGradient]:
    """The entries of ``graph`` that hold now (their ``when`` asked once, here)."""
    return {op: entry for op, entry in graph.get_collection(CUSTOM_GRADIENTS)
            if entry.holds()}
