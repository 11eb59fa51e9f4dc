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


@pytest.fixture
def shm_snapshot():
    """Names in /dev/shm before the test; the test asserts none of ours were added."""
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()
