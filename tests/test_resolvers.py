"""The SLURM and Kubernetes cluster resolvers, the CLIs that read a
scheduler's environment, and the deployment examples (examples/deploy/).

The environments are written out the way the schedulers document them:
``srun`` sets SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURMD_NODENAME and
the step's SLURM_STEP_NODELIST / SLURM_STEP_TASKS_PER_NODE /
SLURM_STEP_NUM_TASKS (beside the job's SLURM_JOB_NODELIST,
SLURM_TASKS_PER_NODE, SLURM_NTASKS); a Kubernetes pod has HOSTNAME =
``<statefulset>-<ordinal>``, KUBERNETES_SERVICE_HOST, and its namespace from
the downward API or the service account's file. Processes run on loopback
with free ports and are always stopped by their own pid.
"""
from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import distrib as dt
from distrib.cluster import (
    ClusterSpec,
    KubernetesClusterResolver,
    SchedulerEnvironmentError,
    SlurmClusterResolver,
    expand_hostlist,
    expand_tasks_per_node,
    parse_tf_config,
    resolver_from_environment,
)
from tests.helpers import ROOT, Proc
from tests.peers.scheduler_env import free_port_base, no_scheduler_env, slurm_env

MANIFEST = os.path.join(ROOT, "examples", "deploy", "kubernetes", "trainer.yaml")
BATCH_SCRIPT = os.path.join(ROOT, "examples", "deploy", "slurm", "trainer.sbatch")


# -- hostlists and tasks per node --------------------------------------------------------

@pytest.mark.parametrize("hostlist, hosts", [
    ("n1", ["n1"]),
    ("localhost", ["localhost"]),
    ("a,b,c", ["a", "b", "c"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("node[009-011]", ["node009", "node010", "node011"]),
    ("node[9-11]", ["node9", "node10", "node11"]),
    ("n[1-2],m5,o[3-4,6,7-9]", ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]),
    ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
    ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
    ("c[2,1],c1", ["c2", "c1", "c1"]),   # SLURM's order, duplicates kept
])
def test_hostlist_expansion(hostlist, hosts) -> None:
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("hostlist, words", [
    ("node[1-3", ["never closed"]), ("node1-3]", ["pair"]), ("node[a-c]", ["'a-c'"]),
    ("node[3-1]", ["backwards"]), ("node[[1]]", ["nest"]), ("a,,b", ["empty"]),
    ("", ["empty"]), ("node[]", ["not a number"]),
])
def test_malformed_hostlist_is_a_typed_error_naming_it(hostlist, words) -> None:
    with pytest.raises(SchedulerEnvironmentError) as info:
        expand_hostlist(hostlist)
    assert isinstance(info.value, ValueError)
    for word in [repr(hostlist), *words]:
        assert word in str(info.value)


@pytest.mark.parametrize("text, counts", [
    ("2(x3),1", [2, 2, 2, 1]), ("4", [4]), ("1(x2),3", [1, 1, 3]), ("3,2(x2)", [3, 2, 2]),
])
def test_tasks_per_node_formats(text, counts) -> None:
    assert expand_tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["2(x)", "x", "2(x0)", "-1", "2(3)", ""])
def test_malformed_tasks_per_node_is_a_typed_error(text) -> None:
    with pytest.raises(SchedulerEnvironmentError, match="tasks per node"):
        expand_tasks_per_node(text)


# -- SlurmClusterResolver ---------------------------------------------------------------

def test_every_task_a_worker_ports_by_local_index() -> None:
    r = SlurmClusterResolver(env=slurm_env("node[01-02]", "2(x2)", 3))
    assert r.cluster_spec() == ClusterSpec({"worker": ["node01:8888", "node01:8889",
                                                       "node02:8888", "node02:8889"]})
    assert (r.task_type, r.task_id) == ("worker", 3)
    assert r.master() == "node02:8889"
    assert r.master("worker", 0, rpc_layer="grpc") == "grpc://node01:8888"
    assert r.num_accelerators() == {}


@pytest.mark.parametrize("jobs", [{"ps": 1, "worker": 3}, "ps:1,worker:3",
                                  '{"ps": 1, "worker": 3}'])
def test_jobs_split_the_ranks_in_order(jobs) -> None:
    seen = []
    for rank in range(4):
        r = SlurmClusterResolver(jobs=jobs, port_base=9000,
                                 env=slurm_env("node[01-03]", "2,1(x2)", rank))
        seen.append((r.task_type, r.task_id))
        assert r.cluster_spec() == ClusterSpec({"ps": ["node01:9000"],
                                                "worker": ["node01:9001", "node02:9000",
                                                           "node03:9000"]})
    assert seen == [("ps", 0), ("worker", 0), ("worker", 1), ("worker", 2)]


def test_jobs_order_is_the_order_written() -> None:
    r = SlurmClusterResolver(jobs={"worker": 2, "ps": 1}, env=slurm_env("n[1-3]", "1(x3)", 2))
    assert (r.task_type, r.task_id) == ("ps", 0)
    assert r.cluster_spec().task_address("ps", 0) == "n3:8888"


def test_job_level_variables_serve_outside_a_step() -> None:
    env = {"SLURM_PROCID": "1", "SLURM_JOB_NODELIST": "c[7-8]", "SLURM_TASKS_PER_NODE": "1(x2)"}
    r = SlurmClusterResolver(env=env)
    assert r.cluster_spec() == ClusterSpec({"worker": ["c7:8888", "c8:8888"]})
    assert r.task_id == 1


def test_tasks_per_node_argument_overrides_the_environment() -> None:
    env = {"SLURM_PROCID": "3", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}
    r = SlurmClusterResolver(tasks_per_node=2, env=env)
    assert r.master() == "n2:8889"


def test_task_type_and_id_can_be_overridden() -> None:
    r = SlurmClusterResolver(env=slurm_env("n1", "2", 0))
    r.task_type, r.task_id = "worker", 1
    assert r.master() == "n1:8889"


@pytest.mark.parametrize("env, words", [
    ({"SLURM_STEP_NODELIST": "n1", "SLURM_STEP_TASKS_PER_NODE": "1"}, ["SLURM_PROCID", "srun"]),
    (slurm_env("n1", "2", 0, SLURM_PROCID="one"), ["SLURM_PROCID='one'"]),
    ({"SLURM_PROCID": "0", "SLURM_STEP_TASKS_PER_NODE": "1"}, ["SLURM_STEP_NODELIST"]),
    ({"SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "n1"}, ["SLURM_STEP_TASKS_PER_NODE"]),
    (slurm_env("n[1-3]", "2(x3)", 0, SLURM_STEP_TASKS_PER_NODE="2(x2)"),
     ["gives 2 nodes", "lists 3"]),
    (slurm_env("n[1-2]", "2(x2)", 0, SLURM_STEP_NODELIST="n[1-2"), ["SLURM_STEP_NODELIST", "closed"]),
    (slurm_env("n[1-2]", "2(x2)", 0, SLURM_STEP_TASKS_PER_NODE="2(x2"),
     ["SLURM_STEP_TASKS_PER_NODE", "'2(x2'"]),
    (slurm_env("n[1-2]", "2(x2)", 3, SLURM_PROCID="4"), ["SLURM_PROCID=4", "4 tasks"]),
    (slurm_env("n[1-2]", "2(x2)", 0, SLURM_STEP_NUM_TASKS="5"), ["SLURM_STEP_NUM_TASKS=5"]),
    # --distribution=cyclic: rank 1 is the first task on the second node
    (slurm_env("n[1-2]", "2(x2)", 2, SLURM_PROCID="1"), ["--distribution=block"]),
])
def test_malformed_slurm_environment_says_what_is_wrong(env, words) -> None:
    with pytest.raises(SchedulerEnvironmentError) as info:
        SlurmClusterResolver(env=env)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("jobs, words", [
    ({"ps": 1, "worker": 4}, ["ask for 5", "has 4"]), ("ps=1", ["job:count"]),
    ({"ps": 0, "worker": 4}, ["'ps'", ">= 1"]), ({"bad name": 4}, ["Invalid job name"]),
    ("{not json", ["JSON"]), ("ps:1,ps:3", ["new job"]),
])
def test_bad_jobs_are_typed_errors(jobs, words) -> None:
    with pytest.raises(SchedulerEnvironmentError) as info:
        SlurmClusterResolver(jobs=jobs, env=slurm_env("n[1-2]", "2(x2)", 0))
    for word in words:
        assert word in str(info.value)


def test_port_base_must_leave_room_for_every_task() -> None:
    with pytest.raises(SchedulerEnvironmentError, match="port_base"):
        SlurmClusterResolver(port_base=65535, env=slurm_env("n1", "2", 0))
    with pytest.raises(SchedulerEnvironmentError, match="port_base"):
        SlurmClusterResolver(port_base=0, env=slurm_env("n1", "2", 0))


def test_gpus_per_task_go_to_cuda_visible_devices() -> None:
    env = slurm_env("n[1-2]", "2(x2)", 3, SLURM_STEP_GPUS="0,1,2,3")
    r = SlurmClusterResolver(gpus_per_task=2, env=env)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert r.gpu_ids == ("2", "3") and r.num_accelerators() == {"GPU": 2}
    env = slurm_env("n1", "4", 2, SLURM_JOB_GPUS="4,5,6,7")   # the job's list when no step's
    SlurmClusterResolver(gpus_per_task=1, env=env)
    assert env["CUDA_VISIBLE_DEVICES"] == "6"
    env = slurm_env("n1", "2", 1)
    SlurmClusterResolver(gpus_per_task=1, gpus_per_node=2, env=env)
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    env = slurm_env("n1", "2", 1)                              # no list: 0, 1, ... assumed
    SlurmClusterResolver(gpus_per_task=3, env=env)
    assert env["CUDA_VISIBLE_DEVICES"] == "3,4,5"


def test_gpus_left_alone_without_gpus_per_task_or_auto_set() -> None:
    env = slurm_env("n1", "2", 1, CUDA_VISIBLE_DEVICES="7")
    SlurmClusterResolver(env=env)
    assert env["CUDA_VISIBLE_DEVICES"] == "7"
    r = SlurmClusterResolver(gpus_per_task=1, auto_set_gpu=False, env=env)
    assert env["CUDA_VISIBLE_DEVICES"] == "7" and r.gpu_ids == ("1",)


@pytest.mark.parametrize("source", [
    {"SLURM_STEP_GPUS": "0,1,2,3"},          # what SLURM says the node has
    {"CUDA_VISIBLE_DEVICES": "0,1,2,3"},     # TF's source
    {},                                      # gpus_per_node=4 given
])
def test_without_gpus_per_task_each_task_gets_its_share_of_the_nodes_gpus(source) -> None:
    """TF's SlurmClusterResolver: gpus_per_task defaults to gpus_per_node // the
    most tasks on a node, and the task with local index L gets GPUs L*G .. L*G+G-1
    (4 GPUs, 2 tasks per node: the first task's CUDA_VISIBLE_DEVICES is 0,1, the
    second's 2,3). Ours used to leave CUDA_VISIBLE_DEVICES as it was."""
    node_gpus = None if source else 4
    for rank, want in [(0, "0,1"), (1, "2,3"), (2, "0,1"), (3, "2,3")]:
        env = slurm_env("n[1-2]", "2(x2)", rank, **source)
        r = SlurmClusterResolver(gpus_per_node=node_gpus, env=env)
        assert env["CUDA_VISIBLE_DEVICES"] == want, (rank, source)
        assert r.num_accelerators() == {"GPU": 2}
        # a second resolver in the same process (a notebook) reads the same share
        # (not the first one's CUDA_VISIBLE_DEVICES as the node's GPUs)
        SlurmClusterResolver(gpus_per_node=node_gpus, env=env)
        assert env["CUDA_VISIBLE_DEVICES"] == want, (rank, source)


def test_a_share_of_the_node_keeps_slurms_ids_and_srun_bindings() -> None:
    env = slurm_env("n1", "2", 1, SLURM_STEP_GPUS="4,5,6,7")
    assert SlurmClusterResolver(env=env).gpu_ids == ("6", "7")
    # uneven nodes: the share is counted on the node with the most tasks (TF's)
    env = slurm_env("n[1-2]", "2,1", 2, SLURM_STEP_GPUS="0,1,2,3")
    assert SlurmClusterResolver(env=env).gpu_ids == ("0", "1")
    # srun gives each task its GPUs itself (--gpus-per-task): left as srun set them
    env = slurm_env("n1", "2", 1, SLURM_STEP_GPUS="0,1,2,3", SLURM_GPUS_PER_TASK="2",
                    CUDA_VISIBLE_DEVICES="2,3")
    assert SlurmClusterResolver(env=env).gpu_ids == () and env["CUDA_VISIBLE_DEVICES"] == "2,3"
    # fewer GPUs than tasks on the node: no share to give (TF would hide them all)
    env = slurm_env("n1", "2", 1, CUDA_VISIBLE_DEVICES="7")
    assert SlurmClusterResolver(env=env).gpu_ids == () and env["CUDA_VISIBLE_DEVICES"] == "7"
    # no GPUs anywhere: nothing set
    env = slurm_env("n1", "2", 1)
    assert SlurmClusterResolver(env=env).num_accelerators() == {}
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_tf_config_session_master_is_the_master() -> None:
    """TF's testSessionMasterRead: TF_CONFIG's ``session_master``, when set, is
    what ``master()`` returns, as written (ours returned this task's address)."""
    config = {"cluster": {"ps": ["ps0:2222", "ps1:2222"],
                          "worker": ["worker0:2222", "worker1:2222", "worker2:2222"]},
              "session_master": "sessionmaster:2222", "task": {"type": "ps", "index": 0}}
    resolver = dt.distribute.cluster_resolver.TFConfigClusterResolver(
        env={"TF_CONFIG": json.dumps(config)})
    assert resolver.master() == "sessionmaster:2222"
    assert resolver.master("worker", 1) == "sessionmaster:2222"   # TF: it wins over all
    del config["session_master"]
    config["rpc_layer"] = "grpc"
    resolver = dt.distribute.cluster_resolver.TFConfigClusterResolver(
        env={"TF_CONFIG": json.dumps(config)})
    assert resolver.master() == "grpc://ps0:2222"                 # TF's testRpcLayerRead
    config["session_master"] = 2222
    with pytest.raises(ValueError, match="session_master"):
        dt.distribute.cluster_resolver.TFConfigClusterResolver(
            env={"TF_CONFIG": json.dumps(config)}).master()


def test_too_few_gpus_on_the_node_is_an_error() -> None:
    env = slurm_env("n1", "2", 1, SLURM_STEP_GPUS="0,1")
    with pytest.raises(SchedulerEnvironmentError, match=r"--gres=gpu:4"):
        SlurmClusterResolver(gpus_per_task=2, env=env)


# -- KubernetesClusterResolver ----------------------------------------------------------

def test_pod_ordinal_and_headless_service_dns_names() -> None:
    r = KubernetesClusterResolver({"ps": 1, "worker": 2}, env={"HOSTNAME": "worker-1"},
                                  namespace_file="/nonexistent")
    assert r.cluster_spec() == ClusterSpec({"ps": ["ps-0.ps:2222"],
                                            "worker": ["worker-0.worker:2222",
                                                       "worker-1.worker:2222"]})
    assert (r.task_type, r.task_id) == ("worker", 1)
    assert r.master() == "worker-1.worker:2222"


def test_namespace_from_downward_api_then_service_account_file(tmp_path) -> None:
    r = KubernetesClusterResolver("ps:1,worker:1", port=3333,
                                  env={"HOSTNAME": "ps-0", "POD_NAMESPACE": "ml"})
    assert r.master() == "ps-0.ps.ml.svc:3333"
    ns = tmp_path / "namespace"
    ns.write_text("team-a\n")
    r = KubernetesClusterResolver("ps:1,worker:1", cluster_domain="cluster.local",
                                  env={"HOSTNAME": "worker-0"}, namespace_file=str(ns))
    assert r.namespace == "team-a"
    assert r.master() == "worker-0.worker.team-a.svc.cluster.local:2222"
    r = KubernetesClusterResolver("ps:1", namespace="given", env={"HOSTNAME": "ps-0",
                                                                  "POD_NAMESPACE": "ml"})
    assert r.master() == "ps-0.ps.given.svc:2222"


def test_shared_service_named_sets_and_fqdn_hostnames() -> None:
    r = KubernetesClusterResolver({"ps": 2, "worker": 1}, service="mnist",
                                  statefulsets={"ps": "mnist-ps", "worker": "mnist-worker"},
                                  env={"HOSTNAME": "mnist-ps-1.mnist.ml.svc.cluster.local"},
                                  namespace_file="/nonexistent")
    assert r.cluster_spec().job_tasks("ps") == ["mnist-ps-0.mnist:2222", "mnist-ps-1.mnist:2222"]
    assert (r.task_type, r.task_id) == ("ps", 1)


def test_a_pod_outside_the_sets_reads_the_cluster_but_has_no_task() -> None:
    r = KubernetesClusterResolver("ps:1,worker:2", env={"HOSTNAME": "coordinator-7f9c"},
                                  namespace_file="/nonexistent")
    assert r.cluster_spec().num_tasks("worker") == 2
    assert r.master() == ""
    with pytest.raises(SchedulerEnvironmentError, match="coordinator-7f9c"):
        r.task_type
    r = KubernetesClusterResolver("ps:1,worker:2", task_type="worker", task_id=0,
                                  env={"HOSTNAME": "laptop"}, namespace_file="/nonexistent")
    assert r.master() == "worker-0.worker:2222"


@pytest.mark.parametrize("kwargs, words", [
    ({"jobs": None}, ["jobs", "DISTRIB_K8S_JOBS"]),
    ({"jobs": {"ps_main": 1}}, ["'ps_main'", "statefulsets="]),
    ({"jobs": "ps:1", "service": "Bad_Name"}, ["service 'Bad_Name'", "DNS label"]),
    ({"jobs": "ps:1", "port": 0}, ["port"]),
    ({"jobs": "ps:1", "statefulsets": {"chief": "c"}}, ["['chief']"]),
    ({"jobs": "ps:1,worker:1", "statefulsets": {"ps": "x", "worker": "x"}}, ["share"]),
])
def test_bad_kubernetes_arguments_are_typed_errors(kwargs, words) -> None:
    with pytest.raises(SchedulerEnvironmentError) as info:
        KubernetesClusterResolver(**kwargs, env={"HOSTNAME": "ps-0"}, namespace_file="/none")
    for word in words:
        assert word in str(info.value)


def test_ordinal_past_the_replicas_is_an_error() -> None:
    r = KubernetesClusterResolver("ps:1,worker:2", env={"HOSTNAME": "worker-2"},
                                  namespace_file="/nonexistent")
    with pytest.raises(SchedulerEnvironmentError, match="ordinal 2.*2 replicas"):
        r.task_id


# -- choosing the resolver from the environment -----------------------------------------

def test_environment_detection_order_and_twins() -> None:
    tf = json.dumps({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}})
    slurm = slurm_env("n[1-2]", "1(x2)", 1, DISTRIB_SLURM_JOBS="ps:1,worker:1",
                      DISTRIB_SLURM_PORT_BASE="7000")
    k8s = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "worker-0",
           "DISTRIB_K8S_JOBS": "ps:1,worker:1", "DISTRIB_K8S_PORT": "5000",
           "DISTRIB_K8S_SERVICE": "train", "POD_NAMESPACE": "ml"}
    assert resolver_from_environment({**slurm, **k8s, "TF_CONFIG": tf}).master() == "h:1"
    r = resolver_from_environment({**slurm, **k8s})
    assert isinstance(r, SlurmClusterResolver) and r.master() == "n2:7000"
    assert (r.task_type, r.task_id) == ("worker", 0)
    assert resolver_from_environment({**slurm, **k8s}, jobs="worker:2", port=8000).master() \
        == "n2:8000"
    r = resolver_from_environment(k8s)
    assert isinstance(r, KubernetesClusterResolver)
    assert r.master() == "worker-0.train.ml.svc:5000"
    assert resolver_from_environment({**slurm, **k8s}, kind="kubernetes").task_type == "worker"
    named = dict(k8s, DISTRIB_K8S_STATEFULSETS="ps:m-ps,worker:m-worker", HOSTNAME="m-ps-0")
    assert resolver_from_environment(named).master() == "m-ps-0.train.ml.svc:5000"


@pytest.mark.parametrize("env, words", [
    ({}, ["TF_CONFIG", "SLURM", "DISTRIB_K8S_JOBS"]),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "ps-0"}, ["DISTRIB_K8S_JOBS"]),
    ({**slurm_env("n1", "1", 0), "DISTRIB_SLURM_PORT_BASE": "high"}, ["DISTRIB_SLURM_PORT_BASE"]),
    ({"KUBERNETES_SERVICE_HOST": "x", "DISTRIB_K8S_JOBS": "ps:1",
      "DISTRIB_K8S_STATEFULSETS": "ps"}, ["DISTRIB_K8S_STATEFULSETS"]),
])
def test_nothing_or_half_an_environment_is_an_error(env, words) -> None:
    with pytest.raises(SchedulerEnvironmentError) as info:
        resolver_from_environment(env)
    for word in words:
        assert word in str(info.value)


def test_reachable_as_dt_distribute_cluster_resolver() -> None:
    ns = dt.distribute.cluster_resolver
    assert ns.SlurmClusterResolver is SlurmClusterResolver
    assert ns.KubernetesClusterResolver is KubernetesClusterResolver
    assert {"TFConfigClusterResolver", "SimpleClusterResolver", "ClusterResolver"} <= set(dir(ns))


# -- the CLIs under a scheduler's environment -------------------------------------------

def test_server_serves_under_a_slurm_step_without_flags() -> None:
    base = free_port_base(2)
    envs = [no_scheduler_env(**slurm_env("localhost", "2", rank), DISTRIB_SLURM_JOBS="ps:1,worker:1",
                             DISTRIB_SLURM_PORT_BASE=str(base)) for rank in (0, 1)]
    args = ["-m", "distrib.server", "--log_level", "WARNING"]
    with Proc(args, env=envs[0], ready_prefix="serving") as ps, \
            Proc(args, env=envs[1], ready_prefix="serving") as worker:
        assert ps.line == f"serving /job:ps/task:0 at 127.0.0.1:{base}"
        assert worker.line == f"serving /job:worker/task:0 at 127.0.0.1:{base + 1}"
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:ps/task:0"):
                a = dt.constant([1.0, 2.0])
            with dt.device("/job:worker/task:0"):
                out = a * 3.0
        with dt.SyncSession(f"distrib://localhost:{base + 1}", graph=g) as sess:
            assert np.allclose(sess.run(out), [3.0, 6.0])


def run_module(module: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("env, words", [
    ({}, ["--cluster", "TF_CONFIG", "SLURM", "DISTRIB_K8S_JOBS"]),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "ps-0"}, ["DISTRIB_K8S_JOBS"]),
    ({"SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "node[1-", "SLURM_STEP_TASKS_PER_NODE": "1"},
     ["SLURM_STEP_NODELIST", "node[1-"]),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "web-0", "DISTRIB_K8S_JOBS": "ps:1"},
     ["web-0"]),
])
def test_server_without_a_cluster_is_one_line_and_exit_2(env, words) -> None:
    res = run_module("distrib.server", env=no_scheduler_env(**env))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for word in words:
        assert word in lines[0]


def test_cluster_cli_prints_or_passes_on_tf_config() -> None:
    env = no_scheduler_env(KUBERNETES_SERVICE_HOST="10.0.0.1", HOSTNAME="worker-1",
                           DISTRIB_K8S_JOBS="ps:1,worker:2", POD_NAMESPACE="ml")
    res = run_module("distrib.cluster", env=env)
    assert res.returncode == 0, res.stderr
    tf = parse_tf_config({"TF_CONFIG": res.stdout})
    assert (tf.task_type, tf.task_id) == ("worker", 1)
    assert tf.cluster.task_address("ps", 0) == "ps-0.ps.ml.svc:2222"
    show = "import os; print(os.environ['TF_CONFIG'])"
    res = run_module("distrib.cluster", "--port", "4444", "--", sys.executable, "-c", show, env=env)
    assert res.returncode == 0, res.stderr
    assert parse_tf_config({"TF_CONFIG": res.stdout}).cluster.task_address("ps", 0) \
        == "ps-0.ps.ml.svc:4444"
    res = run_module("distrib.cluster", "--", "no-such-command-here", env=env)
    assert res.returncode == 2 and "no-such-command-here" in res.stderr


FAKE_SRUN = """\
#!{python}
# srun, as far as the batch script needs it: --ntasks=N processes of the command,
# all on this host, each with the variables srun documents; --label prefixes lines.
import os, subprocess, sys, threading
args = sys.argv[1:]
ntasks, label = 1, False
while args and args[0].startswith("-"):
    opt = args.pop(0)
    if opt.startswith("--ntasks="):
        ntasks = int(opt.split("=", 1)[1])
    label = label or opt == "--label"
procs = []
for rank in range(ntasks):
    env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank), SLURM_NODEID="0",
               SLURMD_NODENAME="localhost", SLURM_STEP_ID="0", SLURM_STEP_NODELIST="localhost",
               SLURM_STEP_NUM_NODES="1", SLURM_STEP_NUM_TASKS=str(ntasks),
               SLURM_STEP_TASKS_PER_NODE=str(ntasks), SLURM_NTASKS=str(ntasks))
    procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True))
def pump(rank, p):
    for line in p.stdout:
        sys.stdout.write(f"{{rank}}: {{line}}" if label else line)
threads = [threading.Thread(target=pump, args=(r, p)) for r, p in enumerate(procs)]
for t in threads:
    t.start()
codes = [p.wait() for p in procs]
for t in threads:
    t.join()
sys.exit(max(codes))
"""


@pytest.mark.slow
def test_slurm_batch_script_trains_under_srun(tmp_path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(FAKE_SRUN.format(python=sys.executable))
    srun.chmod(0o755)
    env = no_scheduler_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                           PYTHON=sys.executable, TRAIN_STEPS="120", LOGDIR=str(tmp_path / "ckpt"),
                           SLURM_JOB_ID="4242", SLURM_SUBMIT_DIR=ROOT, OPENBLAS_NUM_THREADS="1",
                           DISTRIB_SLURM_PORT_BASE=str(free_port_base(4)))
    p = subprocess.Popen(["bash", BATCH_SCRIPT], cwd=str(tmp_path), env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=150)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)   # the group this test started, with its tasks
            p.wait()
    assert p.returncode == 0, out[-3000:]
    assert any(line.startswith("1: done global_step=") for line in out.splitlines()), out[-3000:]


# -- the Kubernetes manifest ------------------------------------------------------------

def manifest_docs() -> list[dict]:
    import yaml
    with open(MANIFEST, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def test_manifest_passes_kubernetes_schema_validation() -> None:
    import kubernetes_validate
    for doc in manifest_docs():
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_schema_validation_can_fail() -> None:
    import kubernetes_validate
    broken = copy.deepcopy(next(d for d in manifest_docs() if d["kind"] == "StatefulSet"))
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"]["tcpSocket"]["prot"] = container["readinessProbe"]["tcpSocket"].pop("port")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


def test_manifest_sets_match_services_jobs_and_the_resolver() -> None:
    docs = manifest_docs()
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    sets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "StatefulSet"}
    assert set(sets) == {"ps", "worker"}
    for name, st in sets.items():
        svc = services[st["spec"]["serviceName"]]
        assert svc["spec"]["clusterIP"] == "None"                    # headless
        assert svc["spec"]["selector"].items() <= st["spec"]["template"]["metadata"]["labels"].items()
        container = st["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        jobs = dict(part.split(":") for part in env["DISTRIB_K8S_JOBS"].split(","))
        assert int(jobs[name]) == st["spec"]["replicas"]
        port = int(env["DISTRIB_K8S_PORT"])
        assert container["readinessProbe"]["tcpSocket"]["port"] == port
        assert svc["spec"]["ports"][0]["port"] == port
        assert "examples/trainer.py" in " ".join(container["args"])
        assert "python -m distrib.cluster" in " ".join(container["args"])
        last = st["spec"]["replicas"] - 1
        r = resolver_from_environment({**env, "KUBERNETES_SERVICE_HOST": "10.0.0.1",
                                       "HOSTNAME": f"{name}-{last}", "POD_NAMESPACE": "ml"})
        assert (r.task_type, r.task_id) == (name, last)
        assert r.master() == f"{name}-{last}.{svc['metadata']['name']}.ml.svc:{port}"


def test_batch_script_splits_jobs_to_its_task_count() -> None:
    text = open(BATCH_SCRIPT, encoding="utf-8").read()
    assert "--ntasks=4" in text and 'DISTRIB_SLURM_JOBS="ps:1,worker:3"' in text
    assert textwrap.dedent(text).startswith("#!/bin/bash")
    assert subprocess.run(["bash", "-n", BATCH_SCRIPT]).returncode == 0
