"""Every ``DISTRIB_*`` environment variable, declared once, and the table of them.

The runtime's knobs are declared here with :class:`transports.settings.Setting`
(the transport layer declares its own there, since it may not import
distrib); ``ALL_SETTINGS`` lists both, in the order docs/ARCHITECTURE.md's
"Settings" table shows them. A module reads a knob with ``STALL_S.get()``:
the variable is parsed on each call, by one parser per type, and a bad
value is a :class:`SettingError` (a ``ValueError``) naming the variable,
the value and what is allowed. A test fails when the document's table and
this list differ, and when a source file names a variable not declared here.

``markdown_table()`` gives the table (``python -c "import distrib.settings as
s; print(s.markdown_table())"``).

This module is distrib's bottom layer: it imports nothing of distrib, so
every layer (``errors`` included) may read a setting.
"""
from __future__ import annotations

from transports.settings import (
    CLUSTER_TOKEN,
    CLUSTER_TOKEN_FILE,
    FRAME_TIMEOUT_S,
    HEARTBEAT_S,
    MAX_FRAME_BYTES,
    SHM_ARENA_BYTES,
    TLS_CA,
    TLS_CERT,
    TLS_KEY,
    TRANSPORT_SETTINGS,
    Setting,
    SettingError,
)

__all__ = ["Setting", "SettingError", "ALL_SETTINGS", "RUNTIME_SETTINGS", "markdown_table",
           "HEARTBEAT_S", "CLUSTER_TOKEN", "CLUSTER_TOKEN_FILE", "TLS_CERT", "TLS_KEY", "TLS_CA",
           "MAX_FRAME_BYTES", "FRAME_TIMEOUT_S", "SHM_ARENA_BYTES",
           "TRANSPORT", "CONNECT_TIMEOUT_S", "SESSION_GC_S", "STALL_S", "INTER_OP_THREADS",
           "COLLECTIVE_STALL_S", "COLLECTIVE_SEGMENT_BYTES", "COLLECTIVE_DIRECT_BYTES",
           "REGISTER_TIMEOUT_S",
           "BIND_ADDRESS", "SLURM_JOBS", "SLURM_PORT_BASE", "SLURM_GPUS_PER_TASK",
           "K8S_JOBS", "K8S_PORT", "K8S_SERVICE", "K8S_STATEFULSETS", "K8S_CLUSTER_DOMAIN",
           "LAUNCH_SETTINGS", "ELASTIC", "GRAPH_OPTIMIZER", "GPU_MATMUL",
           "VECTORIZE_QUEUE_RUNNERS"]

_ACTORS = "distrib.runtime.actors.system"
_COLLECTIVE = "distrib.runtime.collective.spec"
_RESOLVERS = "distrib.cluster.resolvers"
_LAUNCH = "distrib.launch.__main__"

# -- the runtime ----------------------------------------------------------------

TRANSPORT = Setting(
    "DISTRIB_TRANSPORT", "choice", "auto", choices=("auto", "tcp", "shm"), read_by=_ACTORS,
    help="Forces the transport: auto (shared memory to peers on this host, else TCP), tcp or shm.")
CONNECT_TIMEOUT_S = Setting(
    "DISTRIB_CONNECT_TIMEOUT_S", "seconds", 10.0, minimum=0, read_by=_ACTORS,
    help="The deadline for reaching a peer.")
SESSION_GC_S = Setting(
    "DISTRIB_SESSION_GC_S", "seconds", 60.0, minimum=0, read_by=_ACTORS,
    help="How long state tied to a peer outlives its connection (TF's session GC).")
STALL_S = Setting(
    "DISTRIB_STALL_S", "seconds", 30.0, above=0, read_by="distrib.runtime.state.resources",
    help="Seconds between the warnings of a waiting take or dequeue (what it waits for).")
INTER_OP_THREADS = Setting(
    "DISTRIB_INTER_OP_THREADS", "int", 0, minimum=0, default_text="0 (the number of cores)",
    read_by="distrib.runtime.core.kernel_pool",
    help="Heavy kernels of a step that may run at once, the loop's thread included.")
COLLECTIVE_STALL_S = Setting(
    "DISTRIB_COLLECTIVE_STALL_S", "seconds", 60.0, above=0, read_by=_COLLECTIVE,
    help="How often a collective without a timeout logs whom it waits for; members "
         "that issued different collectives fail at the second look.")
COLLECTIVE_SEGMENT_BYTES = Setting(
    "DISTRIB_COLLECTIVE_SEGMENT_BYTES", "bytes", 0, above=0, read_by=_COLLECTIVE,
    default_text="0 (at least 1M, a quarter of a chunk)",
    help="The ring's segment size.")
COLLECTIVE_DIRECT_BYTES = Setting(
    "DISTRIB_COLLECTIVE_DIRECT_BYTES", "bytes", 64 * 1024, above=0, read_by=_COLLECTIVE,
    default_text="64K",
    help="Up to this size a reduce or gather takes the one-round algorithm, not the ring.")

REGISTER_TIMEOUT_S = Setting(
    "DISTRIB_REGISTER_TIMEOUT_S", "seconds", 600.0, minimum=0,
    read_by="distrib.runtime.collective.registration",
    help="How long a collective group waits for a member task (or the group leader) that "
         "it has never reached, as TF's cluster_register_timeout: a worker started later "
         "joins within it; one that never starts fails the group after it, naming it.")

# -- servers and schedulers -------------------------------------------------------

BIND_ADDRESS = Setting(
    "DISTRIB_BIND_ADDRESS", "string", "", read_by="distrib.server.bind_address",
    default_text="(the cluster's host)",
    help="The host every server of this process listens on (no port), as --bind.")
SLURM_JOBS = Setting(
    "DISTRIB_SLURM_JOBS", "string", "", read_by=_RESOLVERS, default_text="(every task a worker)",
    help="Under SLURM, the jobs and their task counts, e.g. ps:1,worker:3.")
SLURM_PORT_BASE = Setting(
    "DISTRIB_SLURM_PORT_BASE", "int", 8888, minimum=0, read_by=_RESOLVERS,
    help="Under SLURM, the first port on each node (plus the task's local index).")
SLURM_GPUS_PER_TASK = Setting(
    "DISTRIB_SLURM_GPUS_PER_TASK", "int", 0, minimum=0, read_by=_RESOLVERS,
    default_text="0 (GPUs left as they are)",
    help="Under SLURM, the GPUs given to each task through CUDA_VISIBLE_DEVICES.")
K8S_JOBS = Setting(
    "DISTRIB_K8S_JOBS", "string", "", read_by=_RESOLVERS, default_text="(required)",
    help="In Kubernetes, each StatefulSet's job and replicas, e.g. ps:1,worker:2.")
K8S_PORT = Setting(
    "DISTRIB_K8S_PORT", "int", 2222, minimum=0, read_by=_RESOLVERS,
    help="In Kubernetes, every task's port.")
K8S_SERVICE = Setting(
    "DISTRIB_K8S_SERVICE", "string", "", read_by=_RESOLVERS, default_text="(one per set)",
    help="In Kubernetes, one headless Service for all the sets.")
K8S_STATEFULSETS = Setting(
    "DISTRIB_K8S_STATEFULSETS", "string", "", read_by=_RESOLVERS, default_text="(the job names)",
    help="In Kubernetes, each job's StatefulSet, e.g. ps:mnist-ps,worker:mnist-worker.")
K8S_CLUSTER_DOMAIN = Setting(
    "DISTRIB_K8S_CLUSTER_DOMAIN", "string", "", read_by=_RESOLVERS,
    help="In Kubernetes, the cluster's domain (e.g. cluster.local), for fully qualified names.")

# -- python -m distrib.launch: each flag's environment twin (the flag wins) ---------


def _launch(flag: str, kind: str, default: object, help: str, minimum: float | None = None) -> Setting:
    return Setting(f"DISTRIB_LAUNCH_{flag.upper()}", kind, default, read_by=_LAUNCH,
                   help=f"--{flag}: {help}", minimum=minimum)


LAUNCH_SETTINGS: dict[str, Setting] = {s.name[len("DISTRIB_LAUNCH_"):].lower(): s for s in (
    _launch("cluster", "path", None, "the cluster file."),
    _launch("ps", "int", None, "ps tasks on free loopback ports.", minimum=0),
    _launch("workers", "string", None, "worker tasks on free loopback ports: M, or MIN:MAX "
            "(elastic: MIN start, `scale` changes the count)."),
    _launch("chief", "bool", False, "one chief task too."),
    _launch("only", "string", None, "start only these tasks (job or job:index, comma-separated)."),
    _launch("max_restarts", "int", 3, "restarts allowed per task.", minimum=0),
    _launch("restart_backoff", "seconds", 1.0, "seconds before the first restart, doubled "
            "each time.", minimum=0),
    _launch("max_backoff", "seconds", 60.0, "the longest wait before a restart.", minimum=0),
    _launch("ps_grace", "seconds", 5.0, "seconds the ps tasks get to stop when told.", minimum=0),
    _launch("stop_timeout", "seconds", 30.0, "seconds a task gets after SIGTERM.", minimum=0),
    _launch("tail_lines", "int", 20, "output lines kept per task, shown when it fails.",
            minimum=0),
    _launch("threads_per_task", "int", 0, "OMP/OPENBLAS/MKL_NUM_THREADS per task where unset "
            "(0: the cores shared out).", minimum=0),
    _launch("gpus_per_task", "int", 0, "each task's own GPUs through CUDA_VISIBLE_DEVICES "
            "(chief, workers, others in turn; ps none; 0: left as it is).", minimum=0),
    _launch("logdir", "path", None, "also write each task's output to DIR/JOB-INDEX.log."),
)}
ELASTIC = Setting(
    "DISTRIB_ELASTIC", "bool", False,
    read_by="distrib.train.chief.role, distrib.distribute.strategies.collective, "
            "distrib.distribute.coordinator.cluster_coordinator",
    help="Set to 1 by an elastic launch (--workers MIN:MAX) in each task's environment: "
         "with a ps job, even a lone worker campaigns for the chief role (others may join); "
         "MultiWorkerMirroredStrategy follows the membership record (regroups at a step).")

GRAPH_OPTIMIZER = Setting(
    "DISTRIB_GRAPH_OPTIMIZER", "choice", "on", choices=("on", "off"),
    read_by="distrib.runtime.step.graph_optimizer",
    help="Whether the master optimizes each step's partitions before they run (off: no "
         "pass runs, whatever a session's graph_options say).")

GPU_MATMUL = Setting(
    "DISTRIB_GPU_MATMUL", "choice", "auto", choices=("auto", "numba", "cublas"),
    read_by="kernels.cuda.matmul",
    help="Which code runs a GPU MatMul: cublas (cuBLAS through NVIDIA's nvmath-python; "
         "an error at the first GPU MatMul where it is not importable), numba (the project's "
         "kernels), or auto (cuBLAS where nvmath-python imports, else numba). Read at each "
         "GPU MatMul (the runtime hands the kernels this declaration).")

VECTORIZE_QUEUE_RUNNERS = Setting(
    "DISTRIB_VECTORIZE_QUEUE_RUNNERS", "bool", True, read_by="distrib.train.input.vectorize",
    help="Whether a queue runner whose enqueue reads one record at a time runs its ops once "
         "over a chunk of records where they convert (off: once per record, as TF's).")

RUNTIME_SETTINGS: tuple[Setting, ...] = (
    TRANSPORT, CONNECT_TIMEOUT_S, SESSION_GC_S, STALL_S, INTER_OP_THREADS,
    COLLECTIVE_STALL_S, COLLECTIVE_SEGMENT_BYTES, COLLECTIVE_DIRECT_BYTES,
    REGISTER_TIMEOUT_S, BIND_ADDRESS, SLURM_JOBS, SLURM_PORT_BASE, SLURM_GPUS_PER_TASK,
    K8S_JOBS, K8S_PORT, K8S_SERVICE, K8S_STATEFULSETS, K8S_CLUSTER_DOMAIN,
    *LAUNCH_SETTINGS.values(), ELASTIC, GRAPH_OPTIMIZER, GPU_MATMUL, VECTORIZE_QUEUE_RUNNERS)
ALL_SETTINGS: tuple[Setting, ...] = TRANSPORT_SETTINGS + RUNTIME_SETTINGS


def markdown_table(settings: tuple[Setting, ...] = ALL_SETTINGS) -> str:
    """The settings as the Markdown table docs/ARCHITECTURE.md holds."""
    rows = ["| Variable | Default | Meaning | Read by |", "|---|---|---|---|"]
    for s in settings:
        meaning = f"{s.help} Allowed: {s.allowed}."
        rows.append(f"| `{s.name}` | {s.shown_default()} | {meaning} | {s.read_by} |")
    return "\n".join(rows) + "\n"
