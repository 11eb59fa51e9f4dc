"""The task's services, in wings a reader can name. Floors run one way: a
wing imports only the wings before it in this order.

- ``core/``: what every wing uses: the kernel thread pool and its cost
  model, a step's abort signal and waits, how a step holds its tensors.
- ``actors/``: the actor system (actors addressed by (address, name),
  request/reply over pooled transport connections), its failure detector,
  and the base of the doors (``actors/door.py``); each service's messages
  are declared in its own wing's ``doors.py``.
- ``chief/``: chief election: the lease an arbiter grants, the election
  loop, the fence that refuses a deposed chief's writes.
- ``state/``: what a task owns across steps: the variable store, resources
  (queues, accumulators), the stateful ops that update them.
- ``collective/``: the collective engine: groups, instances, the ring and
  the small-message exchange.
- ``step/``: running a step: plan (prune, place, partition), the partition
  graph and its executor, the master and worker services, the rendezvous.

Import the modules themselves; nothing is re-exported here.
"""
