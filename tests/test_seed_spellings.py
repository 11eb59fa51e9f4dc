"""The seed documents' own spellings (issue 29): a TF1 script ports by ``tf.`` -> ``dt.``.

- ``tf.train.ClusterSpec``, ``tf.train.Server`` (``create_local_server``) and
  ``tf.distribute.Server`` are, in TF, the very classes of the top level
  (``server_lib.Server`` is exported as both ``distribute.Server`` and
  ``train.Server``): here too, identity, not copies.
- ``tf.Session("grpc://worker7.example.com:2222")``: a grpc:// target is the
  task at host:port, as distrib:// is; other schemes are refused.
- ``tf.app.flags`` / ``tf.app.run``: absl's flags as TF 1.5+ wraps them
  (``platform/flags.py``: reading a flag before parsing parses sys.argv;
  ``platform/app.py``: ``run`` parses with ``known_only=True`` and
  ``sys.exit(main(argv))``).
- ``tf.ConfigProto(gpu_options=tf.GPUOptions(...))`` and ``tf.config``'s
  visibility and memory growth, with TF's checks (``context.py``,
  ``config_test.py``: ``ValueError("Unrecognized device")``,
  ``RuntimeError("... cannot be modified after being initialized")``,
  ``ValueError("Memory growth cannot differ between GPU devices")``; and
  ``gpu_device.cc``'s ``visible_device_list`` errors).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import distrib as dt
import kernels.cuda.devices as kdev
from distrib.app import flags as fl
from distrib.client.session import parse_target
from distrib.errors import AlreadyExistsError, InvalidArgumentError
from distrib.framework import config
from distrib.launch import free_ports
from tests.helpers import ROOT, child_env, reset_device_config, simulated_json

# --- the names -------------------------------------------------------------


def test_train_and_distribute_names_are_the_top_level_objects():
    assert dt.train.ClusterSpec is dt.ClusterSpec
    assert dt.train.Server is dt.Server
    assert dt.distribute.Server is dt.Server
    assert dt.train.Server.create_local_server.__func__ is dt.Server.create_local_server.__func__
    assert {"ClusterSpec", "Server"} <= set(dt.train.__all__)
    assert "Server" in dt.distribute.__all__ and "app" in dt.__all__ and "GPUOptions" in dt.__all__


def test_import_distrib_stays_light():
    code = ("import sys, distrib as dt; dt.app.flags.FLAGS; "
            "print(any(m in sys.modules for m in ('numba', 'distrib.train', 'distrib.keras')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=child_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_the_seeds_hello_world_with_tf1_names():
    # seed 000/002/003: server = tf.train.Server.create_local_server(); tf.Session(server.target)
    with dt.Graph().as_default():
        c = dt.constant("Hello, distributed TensorFlow!")
        server = dt.train.Server.create_local_server()
        try:
            with dt.SyncSession(server.target) as sess:
                assert sess.run(c) == "Hello, distributed TensorFlow!"
        finally:
            server.stop()


# --- grpc:// targets --------------------------------------------------------


def test_parse_target_takes_grpc_as_tf_spells_it():
    assert parse_target("grpc://worker7.example.com:2222") == "worker7.example.com:2222"
    assert parse_target("distrib://worker7.example.com:2222") == "worker7.example.com:2222"
    assert parse_target("localhost:2222") == "localhost:2222"
    for bad in ("http://host:1", "grpc+tls://host:1", "grpc://grpc://host:1"):
        with pytest.raises(InvalidArgumentError, match="'distrib://host:port', 'grpc://host:port'"):
            parse_target(bad)
    with pytest.raises(InvalidArgumentError, match="no port"):
        parse_target("grpc://host")


def test_a_sync_session_on_a_grpc_target_runs_on_that_task():
    with dt.Graph().as_default():
        y = dt.constant([1.0, 2.0]) * 3.0
        server = dt.train.Server.create_local_server()
        try:
            assert server.target.startswith("distrib://")
            port = server.target.rpartition(":")[2]
            with dt.SyncSession(f"grpc://localhost:{port}") as sess:
                assert sess.run(y).tolist() == [3.0, 6.0]
                assert all("/job:local/" in d.name for d in sess.list_devices())
        finally:
            server.stop()


async def test_an_async_session_on_a_grpc_target():
    with dt.Graph().as_default():
        y = dt.constant(2.0) + 1.0
        async with dt.serve({"local": ["localhost:0"]}) as core:
            target = "grpc://" + core.target[len("distrib://"):]
            async with dt.Session(target) as sess:
                assert await sess.run(y) == 3.0


def test_the_config_json_example_of_seed_004(tmp_path):
    # two workers with gpu_options (server.start() again is harmless), a host
    # pinning ops to them, and a session with gpu_options of its own
    w0, w1, host = free_ports(3)
    (tmp_path / "config.json").write_text(json.dumps(
        {"worker": [f"localhost:{w0}", f"localhost:{w1}"], "host": [f"localhost:{host}"]}))
    cluster = dt.train.ClusterSpec(json.load(open(tmp_path / "config.json")))
    gpu_options = dt.GPUOptions(per_process_gpu_memory_fraction=0.2, allow_growth=True)
    servers = []
    try:
        for task in (0, 1):
            server = dt.train.Server(cluster, job_name="worker", task_index=task,
                                     config=dt.ConfigProto(gpu_options=gpu_options))
            server.start()
            servers.append(server)
        server = dt.train.Server(cluster, job_name="host", task_index=0)
        servers.append(server)
        with dt.Graph().as_default():
            with dt.device("/job:worker/task:0"):
                a = dt.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[2, 3], name="a")
                b = dt.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[3, 2], name="b")
                c = dt.matmul(a, b)
            with dt.device("/job:worker/task:1"):
                d = dt.matmul(a, b) + dt.log(100 + c)
            session_gpu = dt.GPUOptions(per_process_gpu_memory_fraction=0.1, allow_growth=True)
            with dt.SyncSession(server.target,
                                config=dt.ConfigProto(gpu_options=session_gpu)) as sess:
                result = sess.run(d)
        m = np.arange(1.0, 7.0).reshape(2, 3) @ np.arange(1.0, 7.0).reshape(3, 2)
        np.testing.assert_allclose(result, m + np.log(100 + m), rtol=1e-5)
    finally:
        for s in servers:
            s.stop()


# --- dt.app.flags -----------------------------------------------------------


def _trainer_flags() -> fl.FlagValues:
    # the seeds' trainer skeleton, on a registry of its own
    f = fl.FlagValues()
    fl.DEFINE_string("ps_hosts", "", "Comma-separated list of hostname:port pairs", flag_values=f)
    fl.DEFINE_string("worker_hosts", "", "Comma-separated list of hostname:port pairs",
                     flag_values=f)
    fl.DEFINE_string("job_name", "", "One of 'ps', 'worker'", flag_values=f)
    fl.DEFINE_integer("task_index", 0, "Index of task within the job", flag_values=f)
    fl.DEFINE_boolean("sync", False, "synchronous training", flag_values=f)
    fl.DEFINE_float("learning_rate", "0.5", "step size", flag_values=f)
    return f


def test_flags_parse_the_seeds_command_line():
    f = _trainer_flags()
    assert f(["trainer.py"]) == ["trainer.py"]
    assert (f.job_name, f.task_index, f.learning_rate, f.sync) == ("", 0, 0.5, False)
    f = _trainer_flags()
    left = f(["trainer.py", "--ps_hosts=ps0.example.com:2222,ps1.example.com:2222",
              "--worker_hosts", "worker0.example.com:2222,worker1.example.com:2222",
              "--job_name=worker", "-task_index=1", "--sync", "--learning_rate", "-0.25"])
    assert left == ["trainer.py"]
    assert f.ps_hosts.split(",") == ["ps0.example.com:2222", "ps1.example.com:2222"]
    assert f.worker_hosts == "worker0.example.com:2222,worker1.example.com:2222"
    assert (f.job_name, f.task_index, f.sync, f.learning_rate) == ("worker", 1, True, -0.25)
    assert f.is_parsed() and f["task_index"].present == 1 and f["job_name"].default == ""


def test_flags_defaults_are_parsed_and_reading_before_parsing_parses_sys_argv(monkeypatch):
    # TF's FLAGS wrapper: the first read parses sys.argv (absl alone would raise)
    f = _trainer_flags()
    monkeypatch.setattr(sys, "argv", ["prog", "--job_name=ps", "extra"])
    assert f.learning_rate == 0.5 and isinstance(f.learning_rate, float)   # default "0.5"
    assert f.job_name == "ps" and f.is_parsed()
    # strict, as TF's: an unknown flag on sys.argv fails that first read
    g = _trainer_flags()
    monkeypatch.setattr(sys, "argv", ["prog", "--nosuchflag=1"])
    with pytest.raises(fl.UnrecognizedFlagError, match="nosuchflag"):
        g.job_name


@pytest.mark.parametrize("args, value", [
    (["--sync"], True), (["--nosync"], False), (["--sync=false"], False), (["--sync=T"], True),
    (["--sync=0"], False), (["--sync=TRUE"], True), (["--sync", "--nosync"], False),
])
def test_boolean_flags_take_absls_forms(args, value):
    f = _trainer_flags()
    f(["prog", *args])
    assert f.sync is value


def test_a_boolean_never_takes_a_separate_value():
    f = _trainer_flags()
    assert f(["prog", "--sync", "false"]) == ["prog", "false"]   # "false" is a positional
    assert f.sync is True
    with pytest.raises(fl.IllegalFlagValueError, match="does not take an argument"):
        f(["prog", "--nosync=1"])
    with pytest.raises(fl.IllegalFlagValueError, match="--sync=maybe"):
        f(["prog", "--sync=maybe"])


def test_unknown_flags_error_unless_known_only_which_keeps_them_in_place():
    f = _trainer_flags()
    with pytest.raises(fl.UnrecognizedFlagError, match="'data_dir'") as e:
        f(["prog", "--data_dir=/tmp", "--job_name=ps"])
    assert e.value.flagname == "data_dir"
    argv = ["prog", "--job_name=ps", "--data_dir=/tmp", "pos", "--task_index", "2", "--",
            "--job_name=worker"]
    assert f(argv, known_only=True) == ["prog", "--data_dir=/tmp", "pos", "--", "--job_name=worker"]
    assert (f.job_name, f.task_index) == ("ps", 2)   # "--" ends the flags
    assert f(["prog", "a", "--", "b"]) == ["prog", "a", "b"]   # "--" itself kept only if known_only


def test_bad_values_name_the_flag():
    f = _trainer_flags()
    with pytest.raises(fl.IllegalFlagValueError, match="--task_index=one"):
        f(["prog", "--task_index=one"])
    with pytest.raises(fl.IllegalFlagValueError, match="Missing value for flag --job_name"):
        f(["prog", "--job_name"])
    with pytest.raises(TypeError, match="list of strings"):
        f("prog --job_name=ps")


def test_duplicate_definitions_are_refused():
    f = _trainer_flags()
    with pytest.raises(fl.DuplicateFlagError, match="job_name"):
        fl.DEFINE_string("job_name", "", "again", flag_values=f)


def test_integer_float_list_enum_flags_and_assignment():
    f = fl.FlagValues()
    fl.DEFINE_integer("steps", "0x10", "hex too", lower_bound=0, flag_values=f)
    fl.DEFINE_float("keep", 0.5, "dropout keep", lower_bound=0.0, upper_bound=1.0, flag_values=f)
    fl.DEFINE_list("hosts", "a:1,b:2", "hosts", flag_values=f)
    fl.DEFINE_enum("mode", "async", ["sync", "async"], "training mode", flag_values=f)
    fl.DEFINE_bool("verbose", "false", "alias of DEFINE_boolean", flag_values=f, short_name="v")
    f(["prog", "--hosts=x:1,y:2,z:3", "--mode", "sync", "-v"])
    assert (f.steps, f.keep, f.hosts, f.mode, f.verbose) == (16, 0.5, ["x:1", "y:2", "z:3"], "sync", True)
    for bad in ("--steps=-1", "--keep=1.5", "--mode=other"):
        with pytest.raises(fl.IllegalFlagValueError):
            f(["prog", bad])
    f.steps = "7"
    assert f.steps == 7 and f.flag_values_dict()["steps"] == 7
    with pytest.raises(AttributeError, match="no flag named"):
        f.nothing = 1
    fl.DEFINE_list("empty", "", "empty list", flag_values=f)
    assert f.empty == []
    f.unparse_flags()
    assert not f.is_parsed() and f["steps"].value == 16


def test_tf1_keyword_names_still_work():
    f = fl.FlagValues()
    fl.DEFINE_string(flag_name="data_dir", default_value="/tmp/data", docstring="where",
                     flag_values=f)
    f(["prog"])
    assert f.data_dir == "/tmp/data"


def test_help_prints_the_flags_and_exits_1(capsys):
    f = _trainer_flags()
    f.define_help_flags()
    with pytest.raises(SystemExit) as e:
        f(["prog", "--help"])
    assert e.value.code == 1
    assert "--task_index: Index of task within the job" in capsys.readouterr().out


# --- dt.app.run -------------------------------------------------------------


def test_run_calls_main_with_the_unparsed_argv_and_exits_with_its_result():
    seen = []

    def main(argv):
        seen.append(argv)
        return 3

    with pytest.raises(SystemExit) as e:
        dt.app.run(main=main, argv=["prog", "--not_a_flag_of_ours=1", "pos"])
    assert e.value.code == 3 and seen == [["prog", "--not_a_flag_of_ours=1", "pos"]]


def test_run_awaits_a_coroutine_main_and_defaults_to_sys_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["prog", "x"])

    async def main(argv):
        import asyncio
        await asyncio.sleep(0)
        return None if argv == ["prog", "x"] else 5

    with pytest.raises(SystemExit) as e:
        dt.app.run(main)
    assert e.value.code is None   # exit status 0


_SKELETON = '''
"""The seeds' trainer skeleton, as far as its flags go."""
import json, sys
import distrib as dt

dt.app.flags.DEFINE_string("ps_hosts", "", "Comma-separated list of hostname:port pairs")
dt.app.flags.DEFINE_string("worker_hosts", "", "Comma-separated list of hostname:port pairs")
dt.app.flags.DEFINE_string("job_name", "", "One of 'ps', 'worker'")
dt.app.flags.DEFINE_integer("task_index", 0, "Index of task within the job")
FLAGS = dt.app.flags.FLAGS


def main(argv):
    cluster = dt.train.ClusterSpec({"ps": FLAGS.ps_hosts.split(","),
                                    "worker": FLAGS.worker_hosts.split(",")})
    print(json.dumps({"argv": argv, "job": FLAGS.job_name, "task": FLAGS.task_index,
                      "tasks": cluster.num_tasks("worker")}))
    return 0 if FLAGS.job_name == "worker" else 2


if __name__ == "__main__":
    dt.app.run()
'''


def test_the_seed_trainer_skeleton_runs_under_dt_app_run(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(textwrap.dedent(_SKELETON))
    args = ["--ps_hosts=ps0.example.com:2222,ps1.example.com:2222",
            "--worker_hosts=worker0.example.com:2222,worker1.example.com:2222",
            "--job_name=worker", "--task_index", "1", "--log_dir=/tmp/x"]
    out = subprocess.run([sys.executable, str(script), *args], cwd=ROOT, env=child_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout)
    assert res == {"argv": [str(script), "--log_dir=/tmp/x"], "job": "worker", "task": 1,
                   "tasks": 2}
    out = subprocess.run([sys.executable, str(script), "--job_name=ps", "--ps_hosts=p:1", "--worker_hosts=w:1"],
                         cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr[-2000:]   # main's return value is the exit status


# --- GPUOptions, ConfigProto, dt.config ---------------------------------------


def test_gpu_options_are_accepted_and_recorded():
    opts = dt.GPUOptions(per_process_gpu_memory_fraction=0.2, allow_growth=True)
    cfg = dt.ConfigProto(gpu_options=opts)
    assert cfg.gpu_options is opts and cfg.gpu_options.allow_growth is True
    assert cfg.gpu_options.per_process_gpu_memory_fraction == 0.2
    assert dt.ConfigProto().gpu_options == dt.GPUOptions()   # TF: always a GPUOptions
    assert dt.ConfigProto(gpu_options={"allow_growth": True}).gpu_options.allow_growth
    assert "gpu_options" not in cfg.as_dict()   # the master gets the session's run options only
    with pytest.raises(TypeError):
        dt.ConfigProto(gpu_options=3)
    with pytest.raises(TypeError):
        dt.GPUOptions(no_such_field=1)
    with pytest.raises(TypeError):
        dt.GPUOptions(visible_device_list=0)
    with pytest.raises(InvalidArgumentError, match="Could not parse entry in 'visible_device_list'"):
        dt.GPUOptions(visible_device_list="0,a")
    with pytest.raises(InvalidArgumentError, match="duplicate entry"):
        dt.GPUOptions(visible_device_list="1,1")


@pytest.fixture
def two_gpus(monkeypatch):
    """This process as if it had two GPUs (no driver is touched: the GPU
    listing a server would do is recorded instead)."""
    reset_device_config()
    monkeypatch.setattr(config, "_gpu_count", lambda: 2)
    asked = []

    def fake_gpu_devices(order=None):
        asked.append(list(order))
        return [{"name": f"GPU:{i}", "memory_bytes": 1 << 30, "description": f"fake GPU {p}"}
                for i, p in enumerate(order)]
    monkeypatch.setattr(kdev, "gpu_devices", fake_gpu_devices)
    yield asked
    reset_device_config()


def test_set_visible_devices_follows_tf(two_gpus):
    cpus, gpus = dt.config.list_physical_devices("CPU"), dt.config.list_physical_devices("GPU")
    assert [g.name for g in gpus] == ["/physical_device:GPU:0", "/physical_device:GPU:1"]
    assert dt.config.get_visible_devices() == cpus + gpus   # all, by default
    with pytest.raises(ValueError, match="Unrecognized device"):
        dt.config.set_visible_devices(config.PhysicalDevice("/physical_device:GPU:7", "GPU"))
    with pytest.raises(ValueError, match="Unrecognized device"):
        dt.config.set_visible_devices(cpus[0], "GPU")
    with pytest.raises(ValueError, match="CPU cannot be hidden"):
        dt.config.set_visible_devices(gpus)
    dt.config.set_visible_devices(gpus[1], "GPU")   # the CPU keeps its visibility
    assert dt.config.get_visible_devices("GPU") == [gpus[1]]
    assert dt.config.get_visible_devices("CPU") == cpus
    # the visible GPUs are the runtime's GPU:0, GPU:1 ...; reading them initializes
    assert [d.name for d in dt.config.list_logical_devices("GPU")] == ["/device:GPU:0"]
    with pytest.raises(RuntimeError, match="cannot be modified after being initialized"):
        dt.config.set_visible_devices(cpus[0])
    dt.config.set_visible_devices(gpus[1], "GPU")   # the same list again is fine
    assert dt.config.experimental.set_visible_devices is dt.config.set_visible_devices


def test_testgpunone_only_the_cpu_visible(two_gpus):
    cpus = dt.config.list_physical_devices("CPU")
    dt.config.set_visible_devices(cpus[0])
    assert len(dt.config.get_visible_devices("CPU")) == 1
    assert dt.config.get_visible_devices("GPU") == []
    assert config.task_gpus() == [] and two_gpus == []   # no GPU listed, no driver asked


def test_memory_growth_follows_tf(two_gpus):
    gpus = dt.config.list_physical_devices("GPU")
    cpu = dt.config.list_physical_devices("CPU")[0]
    exp = dt.config.experimental
    assert exp.get_memory_growth(gpus[0]) is None
    exp.set_memory_growth(gpus[0], True)
    assert exp.get_memory_growth(gpus[0]) is True
    with pytest.raises(ValueError, match="non-GPU"):
        exp.set_memory_growth(cpu, True)
    with pytest.raises(ValueError, match="Unrecognized device"):
        exp.get_memory_growth("GPU:0")
    # TF: growth must agree across the visible GPUs when the devices start
    with pytest.raises(ValueError, match="Memory growth cannot differ between GPU devices"):
        config.task_gpus()
    reset_device_config()
    exp.set_memory_growth(gpus[0], True)
    dt.config.set_visible_devices(gpus[0], "GPU")
    assert [d["name"] for d in config.task_gpus()] == ["GPU:0"] and two_gpus == [[0]]
    with pytest.raises(RuntimeError, match="Physical devices cannot be modified"):
        exp.set_memory_growth(gpus[0], False)
    exp.set_memory_growth(gpus[0], True)   # unchanged: fine


def test_visible_device_list_picks_a_servers_gpus_in_order(two_gpus):
    gpus = dt.config.list_physical_devices("GPU")
    dt.config.set_visible_devices(gpus[1], "GPU")
    assert [d["name"] for d in config.task_gpus()] == ["GPU:0"]
    assert [d["name"] for d in config.task_gpus("1,0")] == ["GPU:0", "GPU:1"]   # the config wins
    assert two_gpus == [[1], [1, 0]]
    with pytest.raises(InvalidArgumentError,
                       match="'visible_device_list' listed an invalid GPU id '2' but visible "
                             "device count is 2"):
        config.task_gpus("0,2")


def test_a_servers_gpu_options_reach_its_device_list(two_gpus):
    with pytest.raises(InvalidArgumentError, match="invalid GPU id '5'"):
        dt.train.Server.create_local_server(
            config=dt.ConfigProto(gpu_options=dt.GPUOptions(visible_device_list="5")))
    server = dt.train.Server.create_local_server(
        config=dt.ConfigProto(gpu_options=dt.GPUOptions(visible_device_list="1")))
    try:
        with dt.Graph().as_default(), dt.SyncSession(server.target) as sess:
            names = [d.name.rpartition("/")[2] for d in sess.list_devices()]
        assert names == ["device:CPU:0", "device:GPU:0"] and two_gpus == [[1]]
    finally:
        server.stop()


def test_a_second_gpu_order_in_one_process_is_refused(monkeypatch):
    # TF: "TensorFlow device (GPU:0) is being mapped to multiple CUDA devices"
    reset_device_config()
    monkeypatch.setattr(config, "_gpu_count", lambda: 2)
    monkeypatch.setattr(kdev, "_order_fixed", True)
    monkeypatch.setattr(kdev, "_order", (1,))
    try:
        with pytest.raises(AlreadyExistsError, match="GPU:0 is being mapped to multiple CUDA devices"):
            config.task_gpus()   # all GPUs: GPU:0 would be GPU 0, not 1
        with pytest.raises(kdev.GpuOrderError, match="GPU:1"):
            kdev.gpu_devices([1, 0])   # GPU:1 was never started in this process
    finally:
        reset_device_config()


def test_the_first_order_narrows_cuda_visible_devices_for_the_drivers_start(monkeypatch):
    seen = []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    monkeypatch.setattr(kdev, "backend", lambda: seen.append(kdev.os.environ["CUDA_VISIBLE_DEVICES"]))
    kdev._start_driver((1, 0))
    assert seen == ["6,4"] and kdev.os.environ["CUDA_VISIBLE_DEVICES"] == "4,6"   # put back


_SIMULATOR = r"""
import json, sys
import distrib as dt
out = {}
dt.config.set_visible_devices([], "GPU")
s = dt.train.Server.create_local_server()
with dt.SyncSession(s.target) as sess:
    out["hidden"] = [d.device_type for d in sess.list_devices()]
s.stop()
out["numba"] = "numba" in sys.modules
try:
    dt.train.Server.create_local_server(
        config=dt.ConfigProto(gpu_options=dt.GPUOptions(visible_device_list="1")))
except dt.errors.InvalidArgumentError as e:
    out["bad"] = str(e)
s = dt.train.Server.create_local_server(config=dt.ConfigProto(
    gpu_options=dt.GPUOptions(visible_device_list="0", allow_growth=True)))
with dt.device("/gpu:0"):
    y = dt.matmul(dt.constant([[1.0, 2.0]]), dt.constant([[3.0], [4.0]]))
with dt.SyncSession(s.target) as sess:
    out["shown"] = [d.device_type for d in sess.list_devices()]
    out["y"] = sess.run(y).tolist()
s.stop()
try:
    dt.config.set_visible_devices(dt.config.list_physical_devices())
except RuntimeError as e:
    out["frozen"] = str(e)
print(json.dumps(out))
"""


def test_visibility_and_visible_device_list_under_the_cuda_simulator():
    res = simulated_json(["-c", _SIMULATOR], timeout=120)
    assert res["hidden"] == ["CPU"] and res["numba"] is False   # hidden: the driver never asked
    assert "invalid GPU id '1' but visible device count is 1" in res["bad"]
    assert res["shown"] == ["CPU", "GPU"] and res["y"] == [[11.0]]
    assert "cannot be modified after being initialized" in res["frozen"]
