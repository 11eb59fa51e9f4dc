"""Shared test setup: every async test runs on a uvloop event loop.

pytest-asyncio 1.5 has no ``event_loop`` fixture; the loop comes from the
``pytest_asyncio_loop_factories`` hook below (one factory, so no extra
parametrization of test ids).
"""
from __future__ import annotations

import os
import sys

import pytest
import uvloop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def pytest_asyncio_loop_factories(config, item):
    return {"uvloop": uvloop.new_event_loop}


def pytest_collection_finish(session):
    """Queue the background children of the selected tests, in the order they run
    (tests/background.py): ``@pytest.mark.background(key, ...)``, each key a
    factory in the module's ``BACKGROUND`` that returns its Spec (None: none)."""
    from tests import background
    if not background.enabled():
        return
    for item in session.items:
        for mark in item.iter_markers("background"):
            factories = getattr(item.module, "BACKGROUND", {})
            for key in mark.args:
                spec = factories[key]()
                if spec is not None:
                    background.schedule(key, spec)


def pytest_sessionfinish(session, exitstatus):
    from tests import background
    background.stop_all()


@pytest.fixture
async def fresh_graph():
    """A fresh default graph, and after the test every dt.function session closed."""
    import distrib as dt
    from distrib.distribute.functions import def_function
    dt.reset_default_graph()
    yield
    await def_function.close_sessions()
    dt.reset_default_graph()


@pytest.fixture
async def fresh_keras(fresh_graph):
    """``fresh_graph``, and Keras' layer names counted from scratch (dense, dense_1 ...)."""
    import distrib as dt
    dt.keras.backend.clear_session()
    yield


@pytest.fixture
def two_cpus():
    """This process's CPU as two logical devices (two replicas on one host, as
    TF's tests do), reset afterwards; a fresh default graph."""
    import distrib as dt
    from tests.helpers import reset_device_config
    reset_device_config()
    cpu = dt.config.list_physical_devices("CPU")[0]
    dt.config.set_logical_device_configuration(
        cpu, [dt.config.LogicalDeviceConfiguration()] * 2)
    dt.reset_default_graph()
    yield
    reset_device_config()
    dt.reset_default_graph()


@pytest.fixture
def shm_snapshot():
    """Names in /dev/shm before the test; the test asserts none of ours were added."""
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


@pytest.fixture
def server():
    """A local server (a real one, on a free port), stopped after the test."""
    import distrib as dt
    srv = dt.Server.create_local_server()
    yield srv
    srv.stop()


@pytest.fixture
def ps_worker_cluster():
    """One ps and two workers started through the CLI (real processes, free ports);
    yields the cluster dict and stops every process afterwards."""
    from tests.peers.cli_cluster import cli_flags_task, cluster_spec
    spec = cluster_spec(ps=1, worker=2)
    procs = []
    try:
        procs.append(cli_flags_task(spec, "ps", 0))
        procs.extend(cli_flags_task(spec, "worker", i) for i in (0, 1))
        yield spec
    finally:
        for p in procs:
            p.stop()
