"""The shared bottom of the runtime: the kernel thread pool and its cost
model, a step's abort signal and bounded waits, how a step holds its
tensors. Imports no other wing."""
