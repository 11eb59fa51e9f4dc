"""The task's services: the actor system, the master (prune, place,
partition, run a step), the worker (partitions, rendezvous), the executor
that runs a partition, the resources and variables a task owns.
Import the modules themselves; nothing is re-exported here."""
