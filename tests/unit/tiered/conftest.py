"""Fixtures for the tiered-storage tests: logs with several segments, a moto S3 server on loopback,
and a remote log manager wired to a manual clock."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.tiered import (
    MOTO_SKIP,
    S3_ENV,
    T0,
    Env,
    MotoServer,
)
from tierlog.testing.clock import ManualClock, ManualScheduler


@pytest.fixture
def env(tmp_path: Path) -> Env:
    clock = ManualClock(T0 + 60_000)
    return Env(tmp_path, clock, ManualScheduler(clock))


# -- S3 (moto server mode on loopback) ---------------------------------------------------------------


@pytest.fixture(scope="session")
def _s3_env() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in S3_ENV}
    os.environ.update(S3_ENV)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def moto_server(_s3_env: None) -> Iterator[MotoServer]:
    try:
        import moto.server  # noqa: F401
    except ImportError:
        pytest.skip(MOTO_SKIP)
    server = MotoServer()
    yield server
    server.stop()


_bucket_counter = [0]


@pytest.fixture
def s3_bucket(moto_server: MotoServer) -> str:
    _bucket_counter[0] += 1
    name = f"tier-bucket-{_bucket_counter[0]}"
    moto_server.create_bucket(name)
    return name


