"""Chief election: the lease the arbiter (the first ps) grants, the loop a
worker runs to hold or win it, and the fence that refuses a lower term's
writes. Imports ``core`` and ``actors``."""
