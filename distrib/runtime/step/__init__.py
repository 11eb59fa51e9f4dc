"""Running a step: the plan (prune, place, partition), the partition graph and
its executor, the master and worker services and their rendezvous. The top
wing: it imports every other one."""
