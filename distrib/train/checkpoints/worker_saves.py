"""Who writes a save under a multi-worker strategy, and when ``save`` returns.

TF's saves are collective under MultiWorkerMirroredStrategy: every worker
calls ``model.save``, ``Checkpoint.save``/``write`` or
``CheckpointManager.save``, every worker writes where it was told, and the
tutorials ("Multi-worker training with Keras", "Custom training loop with
MultiWorkerMirroredStrategy") give each non-chief a temporary folder
(``workertemp_<id>``) which they delete right after, then load the chief's
copy. Two things make that pattern work here as there:

* **Every worker writes its copy** where its path is not the chief's. A
  worker given the chief's very path (every worker passing one path, on one
  shared file system) leaves it to the chief: two processes replacing one
  folder or file would race, and the copy would be the same.
* **``save`` returns on every worker only once the chief's copy is whole.**
  The chief writes, then every worker meets in one small collective step
  (``StepRunner.agree``: the element-wise max of a few integers over the
  workers), which carries a digest of the chief's path (so a non-chief knows
  whether its path is the chief's) and whether the chief's write failed (then
  every worker raises, the non-chiefs an ``AbortedError`` naming the chief,
  instead of loading a file that is not there). A non-chief writes its own
  copy after that step, so a ``load`` of the chief's path right after
  ``save`` finds it on every worker.

Under a multi-worker strategy every worker must save, as in TF: a worker
that has exited fails the others' save with ``UnavailableError`` naming it
(within the collective's rejoin grace); one alive that never calls ``save``
leaves them waiting, named in a warning every stall period. One worker (no strategy, MirroredStrategy,
the coordinator of ParameterServerStrategy) writes, no step.
"""
from __future__ import annotations

import hashlib
import logging
import os
from typing import Any, Awaitable, Callable

from distrib.errors import AbortedError

logger = logging.getLogger(__name__)

__all__ = ["is_chief", "write_in_turn"]

_NOT_CHIEF = -1     # what a non-chief contributes for the chief's digest (digests are >= 0)


def is_chief(strategy: Any) -> bool:
    """Whether this process writes the shared copy (the chief, or no strategy)."""
    return strategy is None or bool(strategy.extended.should_checkpoint)


def _together(strategy: Any) -> bool:
    """Whether every worker runs this save (a multi-worker collective strategy)."""
    return strategy is not None and int(getattr(strategy, "num_workers", 1)) > 1


def path_digest(path: str) -> int:
    """A non-negative 62-bit digest of ``path``'s absolute, normalized spelling."""
    spelled = os.path.normpath(os.path.abspath(os.fspath(path))).encode()
    return int.from_bytes(hashlib.sha256(spelled).digest()[:8], "big") >> 2


async def write_in_turn(strategy: Any, path: str, write: Callable[[], Awaitable[None]],
                        runner: Any) -> bool:
    """Run ``write`` (which writes ``path``) as the module header says: on the
    chief first, then one step with every worker, then on a non-chief whose
    ``path`` is not the chief's. Returns whether this worker wrote."""
    chief = is_chief(strategy)
    if not _together(strategy):
        if chief:
            await write()
        return chief
    digest = path_digest(path)
    failed: BaseException | None = None
    if chief:
        try:
            await write()
        except Exception as exc:   # noqa: BLE001 - told to the other workers, raised below
            failed = exc
    met = await runner.agree([digest if chief else _NOT_CHIEF, int(failed is not None)],
                             strategy)
    if failed is not None:
        raise failed
    if int(met[1]):
        raise AbortedError(f"the chief (worker 0) failed to write its copy of this save (see "
                           f"its log); this worker's {path} is not written either")
    if chief:
        return True
    if int(met[0]) == digest:
        logger.debug("%s is the chief's path: the chief wrote it", path)
        return False
    await write()
    return True
