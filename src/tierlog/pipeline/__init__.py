"""The data pipeline on Spark: ``format("tierlog")`` reads a broker's data directory and remote tier
with the schema and options of Spark's Kafka source, and the maintenance jobs run as Spark jobs.

The data source names are loaded on first use, so the decoding and planning modules underneath can
be imported (by a Spark worker, or a test) without importing PySpark first. They still need it
installed (``pip install 'tierlog[spark]'``): importing the package checks, without importing them,
that PySpark and PyArrow are there, and says so in one line when they are not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog._util.extras import require_extra

require_extra("spark", "the Spark pipeline", "pyspark", "pyarrow")

if TYPE_CHECKING:
    from tierlog.pipeline.jvm import read
    from tierlog.pipeline.source import TierlogDataSource, kafka_schema, register, spark_session

__all__ = ["TierlogDataSource", "kafka_schema", "read", "register", "spark_session"]


def __getattr__(name: str) -> Any:
    if name == "read":
        from tierlog.pipeline import jvm

        return jvm.read
    if name in __all__:
        from tierlog.pipeline import source

        return getattr(source, name)
    raise AttributeError(f"module 'tierlog.pipeline' has no attribute {name!r}")
