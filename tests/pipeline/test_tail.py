"""``tail=broker|local|none`` against a real ``tierlog serve`` tiering to S3 (moto on loopback): the
remote part is planned from the manifests the broker publishes in the bucket and read from S3, the
rest through the broker's Fetch API, and the rows equal what a Kafka consumer reads. ``tail=none``
reads exactly the tiered offsets; ``tail=local`` is the data-dir read it always was."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.pipeline import rows
from tests.helpers.waits import wait_until
from tests.pipeline.test_broker import _consume_all
from tierlog.pipeline.options import TierlogOptionError, parse_options

kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")
pytest.importorskip("moto.server", reason="moto[server] is needed for the S3 tier of these tests")

pytestmark = pytest.mark.integration
TOPIC = "pipe"  # _consume_all reads this topic
S3_CLASS = "tierlog.tiered.backends.s3.S3RemoteStorageManager"
BUCKET = "tailtier"
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A broker whose topic is mostly in S3: closed segments tiered, then deleted locally."""
    from tests.helpers.tiered import S3_ENV, MotoServer

    server = MotoServer()
    server.create_bucket(BUCKET)
    s3 = {"rsm.config.s3.bucket": BUCKET, "rsm.config.s3.endpoint": server.endpoint, "rsm.config.s3.prefix": "tier",
          "rsm.config.s3.max.retries": "1"}
    data = tmp_path_factory.mktemp("tail") / "data"
    broker = BrokerProcess(data, {
        "remote.log.storage.manager.class.name": S3_CLASS, **s3,
        "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0"}, env=S3_ENV).start()
    try:
        admin = admin_mod.AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([admin_mod.NewTopic(TOPIC, num_partitions=2, replication_factor=1, config={
            "segment.bytes": "8192", "retention.ms": "-1", "remote.storage.enable": "true",
            "local.retention.bytes": "1"})])[TOPIC].result(30)
        producer = kafka.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                                   "linger.ms": 2, "batch.num.messages": 20, "compression.type": "lz4"})
        n = 3000
        for i in range(n):
            headers = [("h", b"%d" % i)] if i % 5 == 0 else None
            producer.produce(TOPIC, key=None if i % 7 == 0 else b"k%d" % i, value=b"v%06d-" % i + bytes(i % 50),
                             partition=i % 2, timestamp=T0 + i, headers=headers)
        assert producer.flush(60) == 0

        def tiered() -> bool:
            return all(min((int(f.stem) for f in (data / f"{TOPIC}-{p}").glob("*.log")), default=0) > 500
                       for p in range(2))

        assert wait_until(tiered, 90), f"segments were not tiered and deleted locally:\n{broker.stderr_tail()}"
        ends = {}
        for p in range(2):
            result = admin.list_offsets({kafka.TopicPartition(TOPIC, p): admin_mod.OffsetSpec.latest()})
            ends[p] = next(iter(result.values())).result(30).offset
        creds = {"rsm.config.s3.access.key.id": "testing", "rsm.config.s3.secret.access.key": "testing"}
        yield {"broker": broker, "data": data, "consumed": _consume_all(broker.bootstrap, 2, ends), "n": n,
               "remote": {"remote.log.storage.manager.class.name": S3_CLASS, **s3, **creds}, "admin": admin}
    finally:
        if broker.alive():
            broker.stop()
        server.stop()


def _reader(spark: Any, **options: str) -> Any:
    return spark.read.format("tierlog").option("subscribe", TOPIC).option("includeHeaders", "true").options(
        **options).load()


def test_tail_broker_reads_history_from_s3_and_the_rest_through_the_broker(spark: Any,
                                                                           tiered_broker: dict[str, Any]) -> None:
    broker, consumed = tiered_broker["broker"], tiered_broker["consumed"]
    assert len(consumed) == tiered_broker["n"]
    # No path: the driver has no data dir, no remote-log-metadata/; only the bucket and the broker.
    options = {**tiered_broker["remote"], "tail": "broker", "kafka.bootstrap.servers": broker.bootstrap,
               "subscribe": TOPIC}
    opts = parse_options(options)
    assert opts.tail == "broker" and opts.paths == ()
    parts = opts.partitions(opts.discover())
    for plog in parts:
        ranges = plog.ranges(plog.earliest, plog.latest)
        kinds = ["remote" if r.is_remote else "broker" for r in ranges]
        # History from S3 (segments listed in the manifest), then the tail from the broker.
        assert kinds[0] == "remote" and kinds[-1] == "broker" and "local" not in kinds, kinds
        assert ranges[0].start_offset == 0 and ranges[-1].end_offset == plog.latest
    assert rows(_reader(spark, **options)) == consumed

    # Timestamp bounds resolve through the broker's ListOffsets.
    ts = T0 + 2001
    got = _reader(spark, startingTimestamp=str(ts), **options).groupBy("partition").min("offset").collect()
    assert {r[0]: r[1] for r in got} == {0: 1001, 1: 1000}


def test_tail_broker_plans_from_the_manifests_of_the_topic_id_the_broker_names(tiered_broker: dict[str, Any]) -> None:
    """The broker's DescribeTopics gives the topic id the planner matches manifests by (a topic
    recreated under the same name leaves the old id's manifest behind for a while)."""
    from tierlog.pipeline.broker_tail import broker_topic_ids
    from tierlog.pipeline.catalog import remote_manifests

    opts = parse_options({**tiered_broker["remote"], "subscribe": TOPIC, "tail": "broker",
                          "kafka.bootstrap.servers": tiered_broker["broker"].bootstrap})
    assert opts.broker is not None and opts.remote is not None
    ids = broker_topic_ids(opts.broker, [TOPIC])
    manifests = [m for m in remote_manifests(opts.remote) or [] if m.tip.topic == TOPIC]
    assert len(manifests) == 2 and {m.tip.topic_id for m in manifests} == {ids[TOPIC]}


def test_tail_none_reads_exactly_the_tiered_offsets(spark: Any, tiered_broker: dict[str, Any]) -> None:
    consumed = tiered_broker["consumed"]
    options = {**tiered_broker["remote"], "tail": "none", "subscribe": TOPIC}
    opts = parse_options(options)
    covered = {}
    for plog in opts.partitions(opts.discover()):
        assert plog.remote_segments and plog.earliest == 0
        covered[plog.partition] = plog.latest  # one past the last tiered offset
    got = rows(_reader(spark, **options))
    want = [r for r in consumed if r[4] < covered[r[3]]]
    assert got == want and 0 < len(got) < len(consumed)


def test_tail_local_is_the_data_dir_read_and_the_default_beside_the_broker(spark: Any,
                                                                           tiered_broker: dict[str, Any]) -> None:
    data, consumed, broker = tiered_broker["data"], tiered_broker["consumed"], tiered_broker["broker"]
    local = {**tiered_broker["remote"], "path": str(data), "subscribe": TOPIC}
    assert parse_options(local, master="local[2]").tail == "local"
    assert rows(_reader(spark, **local)) == consumed  # the session's master is local[2]
    # On a cluster (or without a log dir here) the default is the broker, which needs its address.
    with pytest.raises(TierlogOptionError, match="give option 'kafka.bootstrap.servers'"):
        parse_options(local, master="spark://master:7077")
    assert parse_options({**local, "kafka.bootstrap.servers": broker.bootstrap},
                         master="spark://master:7077").tail == "broker"
    with pytest.raises(TierlogOptionError, match="read_committed needs tail=local or tail=broker"):
        parse_options({**tiered_broker["remote"], "subscribe": TOPIC, "tail": "none",
                       "kafka.isolation.level": "read_committed"})


def test_tail_broker_follows_appends_in_a_streaming_query(spark: Any, tiered_broker: dict[str, Any],
                                                          tmp_path: Path) -> None:
    """The same streaming source: history from S3, every new offset through the broker."""
    broker, consumed = tiered_broker["broker"], tiered_broker["consumed"]
    options = {**tiered_broker["remote"], "tail": "broker", "kafka.bootstrap.servers": broker.bootstrap,
               "startingOffsets": "earliest", "subscribe": TOPIC}
    query = (spark.readStream.format("tierlog").options(**options).load()
             .selectExpr("partition", "offset").writeStream.format("memory").queryName("tail_stream")
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="500 milliseconds").start())
    try:
        assert wait_until(lambda: spark.sql("select count(*) from tail_stream").first()[0] >= len(consumed), 120)
        producer = kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(10):
            producer.produce(TOPIC, value=b"late-%d" % i, partition=i % 2, timestamp=int(time.time() * 1000))
        assert producer.flush(30) == 0
        want = len(consumed) + 10
        assert wait_until(lambda: spark.sql("select count(*) from tail_stream").first()[0] >= want, 120)
    finally:
        query.stop()
    seen = spark.sql("select partition, offset from tail_stream").collect()
    assert len(seen) == len({(r[0], r[1]) for r in seen}) == len(consumed) + 10  # each offset exactly once
