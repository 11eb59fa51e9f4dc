"""The chief's work in training: ``ChiefRole`` (elected or fixed), the
checkpoint folder's fence, the restore of a restarted ps (``ps_recovery``),
the chief's periodic checkpoints and summaries, the in-process master ``""``,
and TF1's ``Supervisor`` built on them (its graph ops in ``supervisor_ops``,
its queue runners in ``queue_runners``). Imports ``checkpoints`` and
``optimizers`` (the global step).

Import the modules themselves; ``distrib.train`` re-exports the public names.
"""
