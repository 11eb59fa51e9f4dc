"""The actor system: actors addressed by (address, name), request/reply over
pooled transport connections, heartbeats and the failure detector. Imports
only ``core``."""
