"""Setup for every test directory."""

from __future__ import annotations

import os
from typing import Any

#: Credentials a Spark JVM must not inherit from the test process (see _spark_gateway_without_aws).
AWS_CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def _spark_gateway_without_aws() -> None:
    """Spark's JVM gateway, and the local executors and Python workers it starts, keep the environment
    of the moment the first session in a process starts. Session-scoped S3 fixtures set AWS_* for a
    whole pytest-xdist worker, so whether the JVM inherited them would depend on which tests that worker
    ran first; tests/pipeline/test_s3.py shows credentials reach executors through Spark conf alone.
    So every gateway any test launches starts without them, whichever fixture or in-process CLI call
    starts it."""
    try:
        import pyspark.core.context as spark_context
    except ImportError:  # the pipeline tests skip themselves, naming pyspark
        return
    launch = spark_context.launch_gateway

    def launch_without_aws(conf: Any = None, popen_kwargs: Any = None) -> Any:
        held = {k: os.environ.pop(k) for k in AWS_CREDENTIAL_VARS if k in os.environ}
        try:
            return launch(conf, popen_kwargs)
        finally:
            os.environ.update(held)

    spark_context.launch_gateway = launch_without_aws


_spark_gateway_without_aws()


def _hypothesis_profile() -> None:
    """Property tests draw fresh examples in every run (a failure is a real bug, reproduced from the
    blob hypothesis prints), but never fail for the machine's speed: a loaded 2-core CI box makes
    example generation slow, which hypothesis' ``too_slow`` health check and per-example deadline
    would report as failures of the code under test."""
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:
        return
    settings.register_profile("tierlog", deadline=None, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("tierlog")


_hypothesis_profile()
