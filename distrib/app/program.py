"""``dt.app.run``: TF1's ``tf.app.run``, the last line of the seeds' trainer.

TF1's rule (``tensorflow/python/platform/app.py`` since TF 1.5): define the
help flags, parse the flags this process defined out of ``argv`` (default
``sys.argv``) with ``known_only=True`` (so flags it does not know stay, in
place, in the list ``main`` gets), then ``sys.exit(main(argv))``. Seed 000's
variant, ``tf.app.run(main=main, argv=[sys.argv[0]] + unparsed)`` after its
own argparse, works the same way. One addition, for distrib's async API: a
coroutine function ``main`` (``async def main(argv)``) is run to its end
with ``asyncio.run``.
"""
from __future__ import annotations

import asyncio
import inspect
import sys
from typing import Any, Callable, Sequence

from distrib.app.flags import FLAGS

__all__ = ["run"]


def run(main: Callable[[list[str]], Any] | None = None, argv: Sequence[str] | None = None) -> None:
    """Parse the defined flags out of ``argv`` (default ``sys.argv``), call
    ``main(argv_left)`` and exit the process with what it returns
    (``sys.exit``: None is 0, an int is the exit code, a string is printed
    and exits 1). ``main`` defaults to ``__main__.main``; a coroutine function
    ``main`` is run with ``asyncio.run(main(argv_left))``, so an async trainer
    needs no loop code of its own. ``--help`` prints the flags and exits 1, as
    TF1's does."""
    FLAGS.define_help_flags()
    left = FLAGS(list(sys.argv if argv is None else argv), known_only=True)
    if main is None:
        main = getattr(sys.modules.get("__main__"), "main", None)
        if main is None:
            raise TypeError("dt.app.run() needs main=, or a function main(argv) in the "
                            "program's __main__ module")
    result = main(left)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    sys.exit(result)
