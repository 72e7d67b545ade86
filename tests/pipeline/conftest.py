"""One local Spark session for the whole test run (starting one takes seconds), and one data set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# PySpark is a dependency of the pipeline; without it (or without Java) these tests cannot run at all.
pytest.importorskip("pyspark", reason="the pipeline tests need pyspark (pip install -e '.[dev]')")

from tests.pipeline.data import Dataset, build_dataset


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every pipeline test that uses the Spark session (directly or through another fixture) starts
    a JVM: it is marked ``spark`` so ``-m "not spark"`` leaves them out."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents and "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    import os

    from tierlog.pipeline import spark_session

    # Executors inherit the JVM's environment as it is now: started without AWS credentials, so a
    # test can show that S3 credentials reach them through Spark conf alone (test_s3), whichever
    # test happened to hold them in its environment when the session started.
    held = {k: os.environ.pop(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
            if k in os.environ}
    try:
        session = spark_session("local[2]", app_name="tierlog-tests", conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
        })
    finally:
        os.environ.update(held)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return build_dataset(Path(tmp_path_factory.mktemp("pipeline")))
