"""Sessions: ``Scaffold`` and the session creators (``session_manager``),
``MonitoredSession``/``MonitoredTrainingSession`` and its elected chief
(``elected_session``), the session-run hooks, and the ``Coordinator``.
Imports ``checkpoints``, ``optimizers`` (the global step) and ``chief`` (the
role, the fence, the ps recovery a session's steps ride through).

Import the modules themselves; ``distrib.train`` re-exports the public names.
"""
