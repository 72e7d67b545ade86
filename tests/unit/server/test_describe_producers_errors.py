"""DescribeProducers answers a partition on an offline log dir with KAFKA_STORAGE_ERROR, as Kafka's
ReplicaManager answers an offline partition, while a partition on an online dir of the same request
is described (before, an unreadable partition answered UNKNOWN_TOPIC_OR_PARTITION). A refused
partition is covered on the wire by tests/integration/test_refused_partition_wire.py."""

from __future__ import annotations

import errno
from pathlib import Path

from tests.helpers.server import call, with_broker
from tierlog.errors import ErrorCode
from tierlog.protocol import ApiKey
from tierlog.server.context import BrokerContext


def test_a_partition_on_an_offline_log_dir_answers_kafka_storage_error(tmp_path: Path) -> None:
    async def test(ctx: BrokerContext) -> None:
        made = await call(ctx, ApiKey.CREATE_TOPICS, 7, {"topics": [
            {"name": "t", "num_partitions": 2, "replication_factor": -1, "assignments": [], "configs": []}],
            "timeout": 1000, "validate_only": False})
        assert made.topics[0].error_code == 0
        logs = [ctx.log_manager.get_log("t", p) for p in (0, 1)]
        assert logs[0] is not None and logs[1] is not None
        assert logs[0].dir.parent != logs[1].dir.parent  # one partition in each log dir
        channel = ctx.log_manager.failure_channel
        assert channel.maybe_fail(logs[0].dir.parent, OSError(errno.EIO, "Input/output error"), "a test write")
        described = await call(ctx, ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
            {"name": "t", "partition_indexes": [0, 1]}, {"name": "missing", "partition_indexes": [0]}]})
        codes = {(t.name, p.partition_index): p.error_code for t in described.topics for p in t.partitions}
        assert codes == {("t", 0): ErrorCode.KAFKA_STORAGE_ERROR, ("t", 1): ErrorCode.NONE,
                         ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}

    with_broker(tmp_path, test, **{"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}"})
