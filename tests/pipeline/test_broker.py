"""The end-to-end check: a topic written through a running ``tierlog serve`` by a real client
(librdkafka: every codec, headers, null keys, idempotence), read with format("tierlog") beside the
running broker and compared row for row with what a Kafka consumer reads from it, timestamp bounds
checked against the broker's ListOffsets; then, the broker stopped, most of the topic tiered to a
local-directory remote tier and deleted locally, and read again with the same result."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.pipeline import KAFKA_SCHEMA, rows

kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.integration
TOPIC = "pipe"
T0 = 1_700_000_000_000


def _consume_all(bootstrap: str, partitions: int, ends: dict[int, int]) -> list[tuple[Any, ...]]:
    consumer = kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-check",
                               "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([kafka.TopicPartition(TOPIC, p, kafka.OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    done: set[int] = set()
    deadline = time.monotonic() + 60
    while len(done) < partitions and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == kafka.KafkaError._PARTITION_EOF and msg.offset() >= ends[msg.partition()]:
                done.add(msg.partition())
            continue
        ts_type, ts = msg.timestamp()
        headers = tuple((k, v) for k, v in (msg.headers() or []))
        # librdkafka's TIMESTAMP_CREATE_TIME is 1 and LOG_APPEND_TIME 2; Kafka's (and Spark's) 0 and 1.
        out.append((msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(), ts,
                    0 if ts_type == kafka.TIMESTAMP_CREATE_TIME else 1, headers))
    consumer.close()
    return sorted(out, key=lambda x: (x[2], x[3], x[4]))


def test_tierlog_reads_what_a_kafka_consumer_reads(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        admin = admin_mod.AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([admin_mod.NewTopic(TOPIC, num_partitions=2, replication_factor=1, config={
            "segment.bytes": "4096", "retention.ms": "-1"})])[TOPIC].result(30)
        n = 0
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            producer = kafka.Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                                       "enable.idempotence": True, "linger.ms": 2, "batch.num.messages": 7})
            for _ in range(40):
                headers = [("h", b"x%d" % n), ("empty", None)] if n % 3 == 0 else None
                value = random.Random(n).randbytes(40 + n % 90)  # barely compressible: segments fill up
                producer.produce(TOPIC, key=None if n % 4 == 0 else b"k%d" % n, value=value,
                                 partition=n % 2, timestamp=T0 + n * 10, headers=headers)
                n += 1
            assert producer.flush(30) == 0
        ends: dict[int, int] = {}
        for p in range(2):
            result = admin.list_offsets({kafka.TopicPartition(TOPIC, p): admin_mod.OffsetSpec.latest()})
            ends[p] = next(iter(result.values())).result(30).offset
        assert sum(ends.values()) == n
        by_timestamp: dict[int, dict[int, int]] = {}
        consumed = _consume_all(broker.bootstrap, 2, ends)
        assert len(consumed) == n
        df = (spark.read.format("tierlog").option("path", str(data)).option("subscribe", TOPIC)
              .option("includeHeaders", "true").load())
        assert df.select(*KAFKA_SCHEMA.fieldNames()).schema == KAFKA_SCHEMA
        assert rows(df) == consumed
        assert len({r[3] for r in consumed}) == 2 and any(r[0] is None for r in consumed)

        # Timestamp bounds resolve to what the broker's ListOffsets answers, across both tiers.
        for ts in (T0 + 55, T0 + 10 * n // 2 + 5, T0 + 10 * n - 25):
            want = {}
            for p in range(2):
                result = admin.list_offsets({kafka.TopicPartition(TOPIC, p): admin_mod.OffsetSpec.for_timestamp(ts)})
                want[p] = next(iter(result.values())).result(30).offset
            got = (spark.read.format("tierlog").option("path", str(data)).option("subscribe", TOPIC)
                   .option("startingTimestamp", str(ts)).load().groupBy("partition").min("offset").collect())
            assert {r[0]: r[1] for r in got} == want, ts
            by_timestamp[ts] = want
    finally:
        broker.stop()

    # The broker stopped: tier every closed segment and let local retention delete them.
    _tier_offline(data, tmp_path / "data-remote")
    for p in range(2):
        assert min(int(f.name.split(".")[0]) for f in (data / f"{TOPIC}-{p}").glob("*.log")) > 0
    df = (spark.read.format("tierlog").option("path", str(data)).option("subscribe", TOPIC)
          .option("includeHeaders", "true").load())
    assert rows(df) == consumed
    for ts, want in by_timestamp.items():
        got = (spark.read.format("tierlog").option("path", str(data)).option("subscribe", TOPIC)
               .option("startingTimestamp", str(ts)).load().groupBy("partition").min("offset").collect())
        assert {r[0]: r[1] for r in got} == want, ts


def _tier_offline(data: Path, remote_dir: Path) -> None:
    from tests.pipeline.data import _Logs
    from tierlog.config import LogConfig
    from tierlog.storage.loader import LoadOptions, load_log
    from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
    from tierlog.tiered.layout import METADATA_DIR_NAME
    from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
    from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

    config = LogConfig.from_props({"segment.bytes": 4096, "retention.ms": -1, "remote.storage.enable": True,
                                   "local.retention.bytes": 1})
    logs = {(TOPIC, p): load_log(data / f"{TOPIC}-{p}", config, LoadOptions(had_clean_shutdown=True))
            for p in range(2)}
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(remote_dir), "fsync": "false"})
    rlm = RemoteLogManager(RemoteLogManagerConfig(system_enable=True), _Logs(logs), rsm,
                           FileRemoteLogMetadataManager(data / METADATA_DIR_NAME, sync=False),
                           index_cache_dir=data / "remote-log-index-cache")
    assert rlm.copy_all() >= 2
    for ulog in logs.values():
        ulog.delete_old_segments()
        ulog.close()
    rlm.close()
