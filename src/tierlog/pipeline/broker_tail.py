"""``tail=broker``: the offsets the remote tier does not hold (yet), read through a running broker
with the Kafka protocol (confluent-kafka), so a Spark cluster whose nodes cannot see the broker's
disk still reads a topic whole.

On the driver, :func:`broker_partitions` lists the partitions and their earliest and latest offsets
(ListOffsets, the consumer's isolation level deciding whether "latest" is the high watermark or the
last stable offset) and :func:`broker_offset_for_timestamp` answers timestamp bounds. On an executor,
:func:`read_broker_range` fetches offsets ``[start, end)`` of one partition and returns them as Arrow
batches of Spark's Kafka-source schema. ``kafka.*`` options (other than the ones the source itself
interprets) go to librdkafka as they are, as Spark's Kafka source passes them to its consumer.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tierlog.errors import TierlogError
from tierlog.ids import TopicPartition
from tierlog.pipeline.reader import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS, HEADERS_TYPE

#: Rows per Arrow batch from the broker.
BATCH_ROWS = 50_000
#: How long a fetch may make no progress before the read fails naming the broker.
STALL_TIMEOUT_S = 60.0
_REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class BrokerSpec:
    """How a worker reaches the broker: librdkafka properties (bootstrap.servers and any ``kafka.*``
    option). Picklable; credentials never in a repr."""

    config: tuple[tuple[str, str], ...] = field(repr=False)
    read_committed: bool = False

    @property
    def bootstrap(self) -> str:
        return dict(self.config).get("bootstrap.servers", "")

    def properties(self, **extra: Any) -> dict[str, Any]:
        props: dict[str, Any] = dict(self.config)
        props.update(extra)
        return props


def _admin(spec: BrokerSpec) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(spec.properties())


def _offset_spec() -> Any:
    # confluent-kafka's stubs do not export it (it is public: confluent_kafka.admin.OffsetSpec).
    return importlib.import_module("confluent_kafka.admin").OffsetSpec


def _fail(spec: BrokerSpec, what: str, error: object) -> TierlogError:
    return TierlogError(f"{what} from the broker at {spec.bootstrap} failed: {error}")


def broker_partitions(spec: BrokerSpec, wanted: Any) -> dict[TopicPartition, tuple[int, int]]:
    """(earliest, latest) of every partition of the topics ``wanted(topic)`` accepts."""
    from confluent_kafka import IsolationLevel, KafkaException
    from confluent_kafka import TopicPartition as KTP

    OffsetSpec = _offset_spec()
    admin = _admin(spec)
    try:
        metadata = admin.list_topics(timeout=_REQUEST_TIMEOUT_S)
    except KafkaException as e:
        raise _fail(spec, "listing the topics", e) from None
    tps = [(name, p) for name, topic in metadata.topics.items() if topic.error is None and wanted(name)
           for p in topic.partitions]
    if not tps:
        return {}
    level = IsolationLevel.READ_COMMITTED if spec.read_committed else IsolationLevel.READ_UNCOMMITTED
    out: dict[TopicPartition, list[int]] = {tp: [0, 0] for tp in tps}
    for i, which in enumerate((OffsetSpec.earliest(), OffsetSpec.latest())):
        futures = admin.list_offsets({KTP(t, p): which for t, p in tps}, isolation_level=level,
                                     request_timeout=_REQUEST_TIMEOUT_S)
        for ktp, future in futures.items():
            try:
                out[(ktp.topic, ktp.partition)][i] = future.result(_REQUEST_TIMEOUT_S).offset
            except KafkaException as e:
                raise _fail(spec, f"ListOffsets of {ktp.topic}-{ktp.partition}", e) from None
    return {tp: (lo, hi) for tp, (lo, hi) in out.items()}


def broker_topic_ids(spec: BrokerSpec, topics: list[str]) -> dict[str, bytes]:
    """Each topic's id as the broker knows it (DescribeTopics), so a reader picks the remote
    manifests of the topic that exists now, not those of one deleted under the same name. A topic
    the broker cannot describe is left out (the caller then chooses without its id)."""
    from confluent_kafka import KafkaException, TopicCollection

    if not topics:
        return {}
    admin = _admin(spec)  # held until the answers are in
    futures = admin.describe_topics(TopicCollection(sorted(topics)), request_timeout=_REQUEST_TIMEOUT_S)
    out: dict[str, bytes] = {}
    for name, future in futures.items():
        try:
            found = future.result(_REQUEST_TIMEOUT_S).topic_id
        except KafkaException:
            continue
        if found is not None:
            out[name] = (found.get_most_significant_bits().to_bytes(8, "big", signed=True)
                         + found.get_least_significant_bits().to_bytes(8, "big", signed=True))
    return out


def broker_offset_for_timestamp(spec: BrokerSpec, tp: TopicPartition, timestamp_ms: int) -> int | None:
    """The broker's ListOffsets for a timestamp (None when no record is at or after it)."""
    from confluent_kafka import IsolationLevel, KafkaException
    from confluent_kafka import TopicPartition as KTP

    OffsetSpec = _offset_spec()
    level = IsolationLevel.READ_COMMITTED if spec.read_committed else IsolationLevel.READ_UNCOMMITTED
    admin = _admin(spec)  # held until the answer is in: a client collected early never completes its futures
    futures = admin.list_offsets({KTP(tp[0], tp[1]): OffsetSpec.for_timestamp(timestamp_ms)},
                                 isolation_level=level, request_timeout=_REQUEST_TIMEOUT_S)
    try:
        offset = next(iter(futures.values())).result(_REQUEST_TIMEOUT_S).offset
    except KafkaException as e:
        raise _fail(spec, f"ListOffsets of {tp[0]}-{tp[1]} for timestamp {timestamp_ms}", e) from None
    return None if offset < 0 else int(offset)


# -- on an executor -----------------------------------------------------------------------------------


def _batch(rows: list[Any], topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    n = len(rows)
    columns: list[pa.Array] = [
        pa.array([m.key() for m in rows], pa.binary()),
        pa.array([m.value() for m in rows], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array([m.offset() for m in rows], pa.int64()),
        pa.array([m.timestamp()[1] * 1000 for m in rows], pa.timestamp("us", tz="UTC")),
        # librdkafka's CREATE_TIME is 1 and LOG_APPEND_TIME 2; Kafka's (and Spark's) 0 and 1.
        pa.array([1 if m.timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME else 0 for m in rows], pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array([None if not m.headers() else [{"key": k, "value": v} for k, v in m.headers()]
                                 for m in rows], HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA)


def read_broker_range(spec: BrokerSpec, topic: str, partition: int, start_offset: int, end_offset: int, *,
                      include_headers: bool, check_crcs: bool = True,
                      clock: Any = None) -> Iterator[pa.RecordBatch]:
    """Offsets ``[start_offset, end_offset)`` of one partition from the broker, as a consumer of
    the source's isolation level reads them (read_committed skips aborted records, control records
    never appear), in batches of :data:`BATCH_ROWS` rows."""
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka import TopicPartition as KTP

    from tierlog.clock import SYSTEM_CLOCK

    if start_offset >= end_offset:
        return
    clock = clock or SYSTEM_CLOCK
    consumer = Consumer(spec.properties(**{
        # Assigned, never subscribed and never committed: the group id only satisfies librdkafka.
        "group.id": f"tierlog-spark-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "enable.partition.eof": True, "auto.offset.reset": "error",
        "isolation.level": "read_committed" if spec.read_committed else "read_uncommitted",
        "check.crcs": check_crcs,
    }))
    try:
        consumer.assign([KTP(topic, partition, start_offset)])
        rows: list[Any] = []
        position = start_offset
        stalled_since = clock.monotonic_ns() // 1_000_000
        while position < end_offset:
            messages = consumer.consume(num_messages=10_000, timeout=1.0)
            progressed = False
            for m in messages:
                error = m.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # The end of what the broker holds now: past control records or aborted
                        # transactions, the position may be beyond the last record returned.
                        position = max(position, int(m.offset() or 0))
                        progressed = True
                        continue
                    raise TierlogError(f"reading {topic}-{partition} [{start_offset}, {end_offset}) from the broker "
                                       f"at {spec.bootstrap}: {error.str()}")
                offset = int(m.offset() or 0)
                if offset >= end_offset:
                    position = end_offset
                    break
                rows.append(m)
                position = offset + 1
                progressed = True
            if not messages:
                # A fetch that returned nothing may still have moved past control records.
                [pos] = consumer.position([KTP(topic, partition)])
                if pos.offset > position:
                    position, progressed = pos.offset, True
            if len(rows) >= BATCH_ROWS:
                yield _batch(rows, topic, partition, include_headers)
                rows = []
            now = clock.monotonic_ns() // 1_000_000
            if progressed:
                stalled_since = now
            elif now - stalled_since > STALL_TIMEOUT_S * 1000:
                raise TierlogError(f"reading {topic}-{partition} [{start_offset}, {end_offset}) from the broker at "
                                   f"{spec.bootstrap}: no progress at offset {position} for {STALL_TIMEOUT_S:.0f} s")
        if rows:
            yield _batch(rows, topic, partition, include_headers)
    finally:
        consumer.close()


def consumer_options(options: Mapping[str, str], interpreted: frozenset[str]) -> dict[str, str]:
    """The ``kafka.*`` options (names as given, prefix removed) that go to librdkafka."""
    return {k[len("kafka."):]: v for k, v in options.items()
            if k.lower().startswith("kafka.") and k.lower() not in interpreted}
