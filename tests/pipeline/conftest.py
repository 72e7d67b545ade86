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
    from tierlog.pipeline import spark_session

    # Started without AWS credentials in the JVM's environment: tests/conftest.py launches every
    # gateway without them.
    session = spark_session("local[2]", app_name="tierlog-tests", conf={
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
    })
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return build_dataset(Path(tmp_path_factory.mktemp("pipeline")))
