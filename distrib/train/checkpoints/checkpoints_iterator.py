"""``dt.train.checkpoints_iterator`` and ``wait_for_new_checkpoint``: an
evaluator's loop over the checkpoints a trainer writes (TF's
``checkpoint_utils``), as TF's: blocking generators a ``for`` loop drives.

``checkpoints_iterator(dir, min_interval_secs=0, timeout=None, timeout_fn=None)``
yields each new newest checkpoint of ``dir`` once, at most one every
``min_interval_secs``; when no new one comes within ``timeout`` seconds it
asks ``timeout_fn`` (True: stop; False: keep waiting) or, without one, stops.
A checkpoint is new when its path differs from the last one yielded; the
newest is :func:`distrib.train.checkpoints.state_file.latest_checkpoint`'s,
which skips a newest file that is missing or unreadable. Waiting polls the
directory every second (``seconds_to_sleep``); it never waits past the timeout.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Iterator

from distrib.train.checkpoints.state_file import latest_checkpoint

__all__ = ["checkpoints_iterator", "wait_for_new_checkpoint"]

logger = logging.getLogger(__name__)


def wait_for_new_checkpoint(checkpoint_dir: str, last_checkpoint: str | None = None,
                            seconds_to_sleep: float = 1, timeout: float | None = None
                            ) -> str | None:
    """The newest checkpoint of ``checkpoint_dir`` once it is not ``last_checkpoint``;
    None when ``timeout`` seconds pass first."""
    stop_time = None if timeout is None else time.monotonic() + timeout
    logger.info("waiting for a new checkpoint at %s", checkpoint_dir)
    while True:
        path = latest_checkpoint(checkpoint_dir)
        if path is not None and path != last_checkpoint:
            logger.info("found new checkpoint at %s", path)
            return path
        if stop_time is not None and time.monotonic() + seconds_to_sleep > stop_time:
            return None
        time.sleep(seconds_to_sleep)


def checkpoints_iterator(checkpoint_dir: str, min_interval_secs: float = 0,
                         timeout: float | None = None,
                         timeout_fn: Callable[[], bool] | None = None) -> Iterator[str]:
    """Each new checkpoint path of ``checkpoint_dir``, as it appears (see the module header)."""
    path: str | None = None
    while True:
        new_path = wait_for_new_checkpoint(checkpoint_dir, path, timeout=timeout)
        if new_path is None:
            if timeout_fn is None:
                logger.info("timed out waiting for a checkpoint")
                return
            if timeout_fn():
                return
            continue
        start = time.monotonic()
        path = new_path
        yield path
        wait = start + min_interval_secs - time.monotonic()
        if wait > 0:
            time.sleep(wait)
