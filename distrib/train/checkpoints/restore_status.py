"""What a ``Checkpoint.restore`` matched, and the status object it returns.

A restore walks the file's object graph beside the live objects from the
root (TF's ``_CheckpointRestoreCoordinator``): a node and the object found by
the same edge names are bound; a bound variable gets its value in one step at
once. What is not there yet is handled as TF handles it:

* a value whose variable its owner has not made (a layer not built yet, an
  optimizer's slots and iteration count, made by the first train step) is
  handed to the owner (``defer_restore`` / ``defer_slot_restore``), which
  makes the variable from it: restore on create;
* an object attached later (``ckpt.model = model`` after the restore, a model
  compiled after it) is bound when the walk runs again: on
  ``trackable.children_changed`` (the owner's hook) and on every assertion;
  values found so are assigned by ``await status.run_restore_ops()``.

The assertions are TF's: ``assert_existing_objects_matched`` (every live
variable has a value in the file), ``assert_consumed`` (and every value in the
file found its object), ``assert_nontrivial_match``; each raises
``AssertionError`` naming what did not match by TF's paths
(``(root).model.layer_with_weights-1.kernel``). Values left unmatched when the
restore's state goes away (its ``Checkpoint`` and status dropped, or the
program ending) are logged as a warning, as TF prints them, unless
``expect_partial()`` was called.
"""
from __future__ import annotations

import logging
import weakref
from typing import Any, Callable

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.train.checkpoints import object_graph, trackable

logger = logging.getLogger(__name__)

__all__ = ["RestoreState", "CheckpointLoadStatus", "InitializationOnlyStatus"]


class _Report:
    """What the warning at the end needs (shared with the state, never its owner)."""

    def __init__(self, saved: object_graph.SavedGraph) -> None:
        self.saved = saved
        self.matched: set[int] = set()
        self.unused_attributes: dict[int, list[str]] = {}
        self.expect_partial = False

    def unmatched(self) -> list[int]:
        return [i for i, node in enumerate(self.saved.nodes)
                if node.attributes and i not in self.matched]

    def warn(self) -> None:
        if self.expect_partial:
            return
        lines = [f"Value in checkpoint could not be found in the restored object: "
                 f"{self.saved.name(i)}" for i in self.unmatched()]
        lines += [f"An attribute in the restored object could not be found in the checkpoint. "
                  f"Object: {self.saved.name(i)}, attribute: {attrs}"
                  for i, attrs in self.unused_attributes.items()]
        if lines:
            logger.warning(
                "A dt.train.Checkpoint restore is being deleted with unrestored values (see "
                "below). To silence these warnings, use `status.expect_partial()`.\n%s",
                "\n".join(lines))


class RestoreState:
    """One restore's bindings between the file's nodes and live objects."""

    def __init__(self, path: str, saved: object_graph.SavedGraph,
                 values: dict[str, np.ndarray], root: Any,
                 assign: Callable[[list[tuple[Any, np.ndarray]]], Any]) -> None:
        self.path = path
        self.saved = saved
        self.values = values              # keys not restored yet -> value
        self._root = weakref.ref(root)
        # async, (plain variable, value) pairs: the root's own method, held weakly (the
        # root holds this state; neither keeps the other alive through a cycle)
        self._assign = weakref.WeakMethod(assign) if hasattr(assign, "__self__") else \
            (lambda: assign)
        self.bound: dict[int, Any] = {}
        self.restored: set[int] = set()
        self.deferred: set[int] = set()
        self.ambiguous: set[int] = set()
        self.pending: dict[int, Any] = {}   # bound after the restore: run_restore_ops
        self.report = _Report(saved)
        weakref.finalize(self, self.report.warn)
        trackable.watch(self)

    @property
    def root(self) -> Any:
        return self._root()

    # -- matching ------------------------------------------------------------------------
    def match(self) -> list[tuple[int, Any]]:
        """Bind what can be bound now; the (node, value object) pairs newly bound."""
        root = self.root
        if root is None:
            return []
        new: list[tuple[int, Any]] = []
        queue: list[tuple[int, Any]] = [(0, root)]
        visited: set[int] = set()
        while queue:
            node_id, obj = queue.pop(0)
            if not self._bind(node_id, obj, new) or node_id in visited:
                continue
            visited.add(node_id)
            kids = trackable.children(obj)
            for name, child_id in self.saved.nodes[node_id].children:
                child = kids.get(name)
                if child is not None:
                    queue.append((child_id, child))
                else:
                    self._defer(obj, name, child_id)
        self._match_slots(new)
        return new

    def rematch(self) -> None:
        self.pending.update(self.match())

    def _bind(self, node_id: int, obj: Any, new: list[tuple[int, Any]]) -> bool:
        prior = self.bound.get(node_id)
        if prior is not None:
            if trackable.identity(prior) != trackable.identity(obj):
                self.ambiguous.add(node_id)     # one saved object, two live ones
                return False
            return True
        self.bound[node_id] = obj
        node = self.saved.nodes[node_id]
        if not node.attributes:
            self.report.matched.add(node_id)
        elif trackable.is_value(obj):
            self.report.matched.add(node_id)
            self.deferred.discard(node_id)
            if node_id not in self.restored:
                new.append((node_id, obj))
        else:
            self.report.unused_attributes[node_id] = [a for a, _ in node.attributes]
        return True

    def _restoration(self, node_id: int) -> trackable.Restoration | None:
        key = self.saved.nodes[node_id].key
        if key is None or key not in self.values:
            return None

        def taken(node_id: int = node_id) -> None:
            self.restored.add(node_id)
            self.report.matched.add(node_id)
            self.deferred.discard(node_id)
        return trackable.Restoration(self.values[key], key, taken)

    def _defer(self, owner: Any, name: str, node_id: int) -> None:
        node = self.saved.nodes[node_id]
        if node_id in self.restored or node_id in self.deferred or node_id in self.bound \
                or node.children or not node.attributes:
            return
        hook = getattr(owner, "defer_restore", None)
        restoration = self._restoration(node_id)
        if callable(hook) and restoration is not None and hook(name, restoration):
            self.deferred.add(node_id)

    def _match_slots(self, new: list[tuple[int, Any]]) -> None:
        for node_id, optimizer in list(self.bound.items()):
            for var_id, slot_name, slot_id in self.saved.nodes[node_id].slots:
                if slot_id in self.bound:
                    continue
                variable = self.bound.get(var_id)
                if variable is None or not trackable.is_value(variable):
                    continue
                find = getattr(optimizer, "checkpoint_slot", None)
                slot = find(variable, slot_name) if callable(find) else None
                if slot is not None:
                    self._bind(slot_id, slot, new)
                elif slot_id not in self.deferred and slot_id not in self.restored:
                    hook = getattr(optimizer, "defer_slot_restore", None)
                    restoration = self._restoration(slot_id)
                    if callable(hook) and restoration is not None and \
                            hook(variable, slot_name, restoration):
                        self.deferred.add(slot_id)

    # -- assigning -----------------------------------------------------------------------
    def pairs(self, bound: list[tuple[int, Any]]) -> list[tuple[Any, np.ndarray]]:
        """The plain variables and values that restore ``bound`` (checked first)."""
        out: list[tuple[Any, np.ndarray]] = []
        for node_id, obj in bound:
            key = self.saved.nodes[node_id].key
            if key not in self.values:
                continue
            out.extend(obj.checkpoint_split(checked(self.saved.name(node_id), key, obj,
                                                    self.values[key], self.path)))
        return out

    async def restore(self, bound: list[tuple[int, Any]]) -> None:
        """Assign ``bound``'s values (one step) and forget them."""
        pairs = self.pairs(bound)
        assign = self._assign()
        if pairs and assign is not None:
            await assign(pairs)
        for node_id, _ in bound:
            self.restored.add(node_id)
            self.values.pop(self.saved.nodes[node_id].key, None)

    async def run_pending(self) -> None:
        self.rematch()
        bound, self.pending = list(self.pending.items()), {}
        await self.restore(bound)

    # -- what did not match --------------------------------------------------------------
    def unmatched_live(self) -> list[str]:
        """Live variables (and slots) with no value in the file."""
        root = self.root
        if root is None:
            return []
        live = object_graph.walk(root)
        have = {trackable.identity(o) for o in self.bound.values()}
        return [f"{live.name(i)} ({obj!r})" for i, (node, obj) in
                enumerate(zip(live.nodes, live.objects))
                if node.attributes and trackable.identity(obj) not in have]


def checked(name: str, key: str, obj: Any, value: np.ndarray, path: str) -> np.ndarray:
    """``value`` as ``obj``'s dtype, after checking its shape (TF's message)."""
    array = np.asarray(value)
    shape = obj.shape.as_list() if hasattr(obj.shape, "as_list") else list(obj.shape)
    if list(array.shape) != shape:
        raise InvalidArgumentError(
            f"Received incompatible tensor with shape {list(array.shape)} when attempting to "
            f"restore variable with shape {shape} ({name}, key {key!r}, checkpoint {path!r}); "
            "restore into an object of the saved shape")
    want = np.dtype(obj.dtype.as_numpy_dtype)
    if want.kind == "O" or array.dtype.kind == "O":
        return array
    if array.dtype != want and not np.can_cast(array.dtype, want, casting="same_kind"):
        raise InvalidArgumentError(
            f"{name} (key {key!r}) is {array.dtype} in checkpoint {path!r} but the variable is "
            f"{want}; restore into a variable of the saved dtype")
    return array.astype(want, copy=False)


class CheckpointLoadStatus:
    """What ``Checkpoint.restore`` returns (TF's class of that name)."""

    def __init__(self, state: RestoreState, root: Any) -> None:
        self._state = state
        self._root = root   # the status keeps the root alive, as TF's does

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Every live object matched and every value in the checkpoint found its
        object (a value still waiting for its variable to be made fails it)."""
        self.assert_existing_objects_matched()
        state = self._state
        unresolved = [state.saved.name(i) for i, node in enumerate(state.saved.nodes)
                      if node.attributes and i not in state.bound and i not in state.restored]
        if unresolved:
            raise AssertionError(
                f"Unresolved object(s) in checkpoint {state.path!r}: {unresolved}; no Python "
                "object of this program matched them (yet)")
        if state.report.unused_attributes:
            lines = [f"{state.saved.name(i)} ({state.bound.get(i)!r}): {attrs}"
                     for i, attrs in state.report.unused_attributes.items()]
            raise AssertionError("Unused attributes in these objects (the attributes exist in "
                                 "the checkpoint but were not restored):\n" + "\n".join(lines))
        return self

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        """Every variable reachable from the root now has a value in the checkpoint."""
        state = self._state
        state.rematch()
        if state.ambiguous:
            names = [state.saved.name(i) for i in sorted(state.ambiguous)]
            raise AssertionError(f"Objects {names} of checkpoint {state.path!r} match more "
                                 "than one Python object each")
        missing = state.unmatched_live()
        if missing:
            shown = missing[:10]
            raise AssertionError(
                f"Found {len(missing)} Python objects that were not bound to checkpointed "
                f"values, likely due to changes in the Python program. Showing {len(shown)} "
                f"of {len(missing)} unmatched objects: {shown}")
        return self

    def assert_nontrivial_match(self) -> CheckpointLoadStatus:
        """Something besides the root matched."""
        state = self._state
        state.rematch()
        if len(set(state.bound) | state.restored) <= 1:
            missing = state.unmatched_live()
            if missing:
                raise AssertionError(
                    "Nothing except the root object matched a checkpointed value. Typically "
                    "this means that the checkpoint does not match the Python program. The "
                    f"following objects have no matching checkpointed value: {missing}")
            raise AssertionError(f"Nothing to load. No dependencies have been added to "
                                 f"{self._root!r} yet.")
        return self

    def expect_partial(self) -> CheckpointLoadStatus:
        """Silence the warning about values left unmatched."""
        self._state.report.expect_partial = True
        return self

    async def run_restore_ops(self, session: Any = None) -> None:
        """Assign the values of objects bound since the restore (attached later)."""
        await self._state.run_pending()

    async def initialize_or_restore(self, session: Any = None) -> None:
        """``run_restore_ops``; the rest is initialized on first use, as TF2 eagerly."""
        await self.run_restore_ops(session)


class InitializationOnlyStatus:
    """What ``restore(None)`` returns: nothing is restored, variables start from
    their initial values on first use."""

    def __init__(self, root: Any) -> None:
        self._root = root

    def _fail(self) -> AssertionError:
        return AssertionError("No checkpoint specified (save_path=None); nothing is being "
                              "restored.")

    def assert_consumed(self) -> InitializationOnlyStatus:
        raise self._fail()

    def assert_existing_objects_matched(self) -> InitializationOnlyStatus:
        raise self._fail()

    def assert_nontrivial_match(self) -> InitializationOnlyStatus:
        raise self._fail()

    def expect_partial(self) -> InitializationOnlyStatus:
        return self

    async def run_restore_ops(self, session: Any = None) -> None:
        raise AssertionError("No checkpoint specified, so no restore ops are available "
                             "(save_path=None to Checkpoint.restore).")

    async def initialize_or_restore(self, session: Any = None) -> None:
        """Nothing to do: variables are initialized on first use."""
