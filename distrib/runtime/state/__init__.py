"""What a task owns across steps: the variable store, resources (queues,
conditional accumulators) and the stateful ops that read and update them.
Imports ``core``."""
