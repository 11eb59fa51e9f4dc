"""ClusterSpec, TF_CONFIG parsing and cluster resolvers (distrib/cluster.py)."""
from __future__ import annotations

import json

import pytest

from distrib.cluster import (
    ClusterSpec,
    SimpleClusterResolver,
    TFConfigClusterResolver,
    parse_tf_config,
    task_string,
)

DENSE = {"ps": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2224"]}


def test_dense_accessors_match_tf() -> None:
    cluster = ClusterSpec(DENSE)
    assert cluster.jobs == ["ps", "worker"]
    assert cluster.num_tasks("worker") == 2
    assert cluster.task_address("worker", 1) == "localhost:2224"
    assert cluster.task_indices("worker") == [0, 1]
    assert cluster.job_tasks("worker") == ["localhost:2223", "localhost:2224"]
    assert cluster.as_dict() == DENSE


def test_jobs_are_sorted_whatever_the_input_order() -> None:
    assert ClusterSpec({"worker": ["a:1"], "chief": ["b:2"], "ps": ["c:3"]}).jobs == ["chief", "ps", "worker"]


def test_sparse_job_has_gaps_and_stays_a_dict() -> None:
    cluster = ClusterSpec({"worker": {3: "b:2", 0: "a:1"}})
    assert cluster.task_indices("worker") == [0, 3]
    assert cluster.num_tasks("worker") == 2
    assert cluster.job_tasks("worker") == ["a:1", None, None, "b:2"]
    assert cluster.as_dict() == {"worker": {0: "a:1", 3: "b:2"}}


def test_dict_with_dense_indices_becomes_a_list() -> None:
    assert ClusterSpec({"local": {1: "h:2", 0: "h:1"}}).as_dict() == {"local": ["h:1", "h:2"]}


def test_sparse_string_keys_from_json_are_task_indices() -> None:
    assert ClusterSpec({"local": {"37": "localhost:0"}}).task_indices("local") == [37]


def test_copy_and_equality_by_content() -> None:
    a = ClusterSpec(DENSE)
    b = ClusterSpec(a)
    assert a == b and not (a != b)
    assert a == DENSE
    assert a != ClusterSpec({"ps": ["localhost:2222"]})
    assert ClusterSpec({"w": {0: "a:1"}}) == ClusterSpec({"w": ["a:1"]})


def test_empty_spec_is_falsy_and_nonempty_truthy() -> None:
    assert not ClusterSpec({})
    assert not ClusterSpec()
    assert ClusterSpec(DENSE)


def test_unknown_job_names_the_valid_ones() -> None:
    cluster = ClusterSpec(DENSE)
    for call in (lambda: cluster.num_tasks("chief"), lambda: cluster.task_indices("chief"),
                 lambda: cluster.job_tasks("chief"), lambda: cluster.task_address("chief", 0)):
        with pytest.raises(ValueError, match=r"No such job.*'chief'.*\['ps', 'worker'\]"):
            call()


def test_unknown_task_names_the_valid_indices() -> None:
    with pytest.raises(ValueError, match=r"No such task index 5 in job 'worker'.*\[0, 1\]"):
        ClusterSpec(DENSE).task_address("worker", 5)


def test_address_without_port_says_port() -> None:
    with pytest.raises(ValueError, match=r"'localhost' of /job:worker/task:1 has no port: write host:port"):
        ClusterSpec({"worker": ["localhost:1", "localhost"]})


@pytest.mark.parametrize("address", ["h:port", "h:70000", "h:-1", "h:", "a:b:c"])
def test_bad_port_is_rejected_naming_the_entry(address: str) -> None:
    with pytest.raises(ValueError, match=r"/job:w/task:0"):
        ClusterSpec({"w": [address]})


def test_port_zero_and_ipv6_are_allowed() -> None:
    cluster = ClusterSpec({"local": ["localhost:0"], "v6": ["[::1]:2222"]})
    assert cluster.task_address("local", 0) == "localhost:0"
    assert cluster.task_address("v6", 0) == "[::1]:2222"


@pytest.mark.parametrize("index", ["a", -1, 1.5, True])
def test_bad_task_index_is_rejected(index: object) -> None:
    with pytest.raises(ValueError, match="task index"):
        ClusterSpec({"w": {index: "h:1"}})


@pytest.mark.parametrize("job", ["1worker", "my-job", "", "a/b", 3])
def test_job_name_must_be_an_identifier(job: object) -> None:
    with pytest.raises(ValueError, match="Invalid job name"):
        ClusterSpec({job: ["h:1"]})


def test_tasks_of_wrong_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="must be a list"):
        ClusterSpec({"w": "h:1"})


def test_from_json_reads_the_cluster_file(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"worker": ["10.0.0.1:2222", "10.0.0.2:2222"], "host": ["10.0.0.1:2223"]}))
    cluster = ClusterSpec.from_json(str(path))
    assert cluster.jobs == ["host", "worker"]
    assert cluster.task_address("worker", 1) == "10.0.0.2:2222"


def test_to_json_round_trips_sparse_jobs(tmp_path) -> None:
    cluster = ClusterSpec({"ps": ["a:1"], "worker": {0: "b:1", 4: "c:1"}})
    path = tmp_path / "c.json"
    path.write_text(cluster.to_json())
    assert ClusterSpec.from_json(path) == cluster


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"worker": ["nohost"]}', "has no port"),
])
def test_from_json_malformed_file_is_a_value_error_naming_the_file(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        ClusterSpec.from_json(path)
    assert "bad.json" in str(info.value)


def test_from_json_missing_file(tmp_path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        ClusterSpec.from_json(tmp_path / "nope.json")


def test_from_flags_like_tf1_trainer_scripts() -> None:
    cluster = ClusterSpec.from_flags(ps_hosts="h:2222", worker_hosts="h:2223, h:2224", chief_hosts="h:2225")
    assert cluster.as_dict() == {"chief": ["h:2225"], "ps": ["h:2222"], "worker": ["h:2223", "h:2224"]}
    assert ClusterSpec.from_flags(worker_hosts="h:1", ps_hosts="").jobs == ["worker"]


def test_task_string() -> None:
    assert task_string("worker", 3) == "/job:worker/task:3"


def _env(config: object) -> dict[str, str]:
    return {"TF_CONFIG": config if isinstance(config, str) else json.dumps(config)}


def test_parse_tf_config_reads_cluster_task_and_rpc_layer() -> None:
    config = {"cluster": DENSE, "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"}
    cluster, job, index, rpc = parse_tf_config(_env(config))
    assert cluster == ClusterSpec(DENSE)
    assert (job, index, rpc) == ("worker", 1, "grpc")


def test_parse_tf_config_unset_gives_empty_cluster() -> None:
    parsed = parse_tf_config({})
    assert not parsed.cluster
    assert (parsed.task_type, parsed.task_id, parsed.rpc_layer) == (None, None, None)


@pytest.mark.parametrize("config, message", [
    ("{oops", "not valid JSON"),
    ("[]", "JSON object"),
    ({"cluster": ["a:1"]}, '"cluster" must be an object'),
    ({"cluster": {"worker": ["nohost"]}}, "has no port"),
    ({"cluster": DENSE, "task": "worker"}, '"task" must be an object'),
    ({"cluster": DENSE, "task": {"type": "chief", "index": 0}}, "not a job of its cluster"),
    ({"cluster": DENSE, "task": {"type": "worker", "index": 2}}, r"task indices are \[0, 1\]"),
    ({"cluster": DENSE, "task": {"type": "worker", "index": "x"}}, "must be an int"),
])
def test_bad_tf_config_says_what_is_wrong(config: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_tf_config(_env(config))


def test_evaluator_task_may_be_outside_the_cluster() -> None:
    parsed = parse_tf_config(_env({"cluster": DENSE, "task": {"type": "evaluator", "index": 0}}))
    assert parsed.task_type == "evaluator"


def test_tf_config_resolver_reads_env_and_gives_master() -> None:
    env = _env({"cluster": DENSE, "task": {"type": "worker", "index": 1}})
    resolver = TFConfigClusterResolver(env=env)
    assert resolver.cluster_spec() == ClusterSpec(DENSE)
    assert (resolver.task_type, resolver.task_id, resolver.rpc_layer) == ("worker", 1, None)
    assert resolver.master() == "localhost:2224"
    assert resolver.master("ps", 0, rpc_layer="distrib") == "distrib://localhost:2222"
    assert resolver.num_accelerators() == {}


def test_tf_config_resolver_overrides_and_os_environ(monkeypatch) -> None:
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": DENSE, "task": {"type": "ps", "index": 0},
                                                "rpc_layer": "grpc"}))
    resolver = TFConfigClusterResolver(task_type="worker", task_id=0)
    assert resolver.master() == "grpc://localhost:2223"
    resolver.task_id = 1
    assert resolver.master() == "grpc://localhost:2224"


def test_simple_cluster_resolver() -> None:
    resolver = SimpleClusterResolver(ClusterSpec(DENSE), task_type="worker", task_id=0)
    assert resolver.cluster_spec() == ClusterSpec(DENSE)
    assert (resolver.task_type, resolver.task_id) == ("worker", 0)
    assert resolver.master() == ""
    assert resolver.master("worker", 1) == "localhost:2224"
    assert resolver.num_accelerators() == {}
    with pytest.raises(ValueError, match="No such job"):
        resolver.master("chief", 0)
