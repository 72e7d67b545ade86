"""The controller: command validation (Kafka error codes), atomic appends, listeners, restarts."""

from __future__ import annotations

import pytest

from tests.helpers.metadata import Env
from tierlog.errors import ConfigError, TierlogError, UnknownTopicOrPartitionError
from tierlog.metadata.configs import AlterConfigOp, AlterConfigOpType
from tierlog.metadata.controller import PRODUCER_ID_BLOCK_SIZE, Controller
from tierlog.metadata.delta import MetadataDelta
from tierlog.metadata.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidUpdateVersionError,
    NotControllerError,
    TopicExistsError,
)
from tierlog.metadata.features import FeatureUpdate
from tierlog.metadata.image import MetadataImage
from tierlog.metadata.records import ConfigResourceType
from tierlog.records import iter_headers

TOPIC = ConfigResourceType.TOPIC
BROKER = ConfigResourceType.BROKER


def batches(c: Controller) -> list[tuple[int, int]]:
    """(base offset, record count) of every batch in the metadata log."""
    mlog = c.metadata_log
    data = mlog.log.read(mlog.log_start_offset, 1 << 30).read_bytes()
    return [(h.base_offset, h.records_count) for h in iter_headers(data)]


def test_bootstrap_writes_metadata_version(env: Env) -> None:
    c = env.open()
    assert c.image.metadata_version == 21
    assert batches(c) == [(0, 1)]


def test_create_topic_is_one_atomic_batch(env: Env) -> None:
    c = env.open()
    result = c.create_topic("orders", 3, configs={"retention.ms": 1000, "retention.min.timestamp": "5"})
    topic = c.image.topic("orders")
    assert topic is not None and topic.topic_id == result.topic_id and topic.num_partitions == 3
    assert all(p.leader == 1 and p.replicas == (1,) and p.isr == (1,) for p in topic.partitions.values())
    # Canonical key names (the alias is stored under its definition's name), Kafka string values.
    assert dict(c.image.topic_configs("orders")) == {"retention.ms": "1000", "log.retention.min.timestamp": "5"}
    # topic + 2 configs + 3 partitions in one batch after the bootstrap batch
    assert batches(c) == [(0, 1), (1, 6)]
    assert c.image.provenance.last_offset == 6


@pytest.mark.parametrize(
    ("call", "error", "code"),
    [
        (lambda c: c.create_topic("orders", 1), TopicExistsError, 36),
        (lambda c: c.create_topic("new", 0), InvalidPartitionsError, 37),
        (lambda c: c.create_topic("new", -5), InvalidPartitionsError, 37),
        (lambda c: c.create_topic("new", 1, replication_factor=3), InvalidReplicationFactorError, 38),
        (lambda c: c.create_topic("new", 1, replication_factor=0), InvalidReplicationFactorError, 38),
        (lambda c: c.create_topic("bad name", 1), InvalidTopicError, 17),
        (lambda c: c.create_topic("", 1), InvalidTopicError, 17),
        (lambda c: c.create_topic("x" * 250, 1), InvalidTopicError, 17),
        (lambda c: c.create_topic("a_b", 1), InvalidTopicError, 17),  # collides with a.b
        (lambda c: c.create_topic("__cluster_metadata", 1), InvalidRequestError, 42),
        (lambda c: c.create_topic("new", 1, configs={"retention.mss": "1"}), ConfigError, 40),
        (lambda c: c.create_topic("new", 1, configs={"retention.ms": "soon"}), ConfigError, 40),
        (lambda c: c.create_topic("new", 1, configs={"retention.ms": "-7"}), ConfigError, 40),
        (lambda c: c.create_topic("new", 1, configs={"retention.ms": "1000", "local.retention.ms": "2000"}),
         ConfigError, 40),
        (lambda c: c.delete_topic("missing"), UnknownTopicOrPartitionError, 3),
        (lambda c: c.create_partitions("missing", 4), UnknownTopicOrPartitionError, 3),
        (lambda c: c.create_partitions("orders", 1), InvalidPartitionsError, 37),
        (lambda c: c.create_partitions("orders", 2), InvalidPartitionsError, 37),
        (lambda c: c.alter_configs(TOPIC, "missing", {}), UnknownTopicOrPartitionError, 3),
        (lambda c: c.alter_configs(BROKER, "", {"sanity.check.all.logs.enabled": "false"}), ConfigError, 40),
        (lambda c: c.alter_configs(BROKER, "x", {}), InvalidRequestError, 42),
        (lambda c: c.incremental_alter_configs(TOPIC, "orders", [AlterConfigOp("retention.ms", AlterConfigOpType.APPEND, "1")]),
         ConfigError, 40),
        (lambda c: c.set_metadata_version(0), InvalidUpdateVersionError, 95),
        (lambda c: c.set_metadata_version(99), InvalidUpdateVersionError, 95),
        (lambda c: c.set_metadata_version(16), InvalidUpdateVersionError, 95),  # a downgrade across 3.7-IV2
        (lambda c: c.update_features([FeatureUpdate("metadata.version", 20)]), InvalidUpdateVersionError, 95),
        (lambda c: c.update_features([FeatureUpdate("no.such.feature", 1)]), InvalidUpdateVersionError, 95),
    ],
)
def test_validation_errors(env: Env, call, error: type[TierlogError], code: int) -> None:  # type: ignore[no-untyped-def]
    c = env.open()
    c.create_topic("orders", 2)
    c.create_topic("a.b", 1)
    before = (c.metadata_log.log_end_offset, c.image)
    with pytest.raises(error) as info:
        call(c)
    assert info.value.error_code == code
    # A rejected command writes nothing.
    assert (c.metadata_log.log_end_offset, c.image) == before


def test_validate_only_writes_nothing(env: Env) -> None:
    c = env.open()
    end = c.metadata_log.log_end_offset
    result = c.create_topic("orders", 4, validate_only=True)
    assert result.num_partitions == 4 and c.image.topic("orders") is None
    assert c.metadata_log.log_end_offset == end


def test_delete_topic_and_create_partitions(env: Env) -> None:
    c = env.open()
    tid = c.create_topic("orders", 2, configs={"retention.ms": "5"}).topic_id
    assert c.create_partitions("orders", 5) == 5
    assert c.image.topic("orders").num_partitions == 5  # type: ignore[union-attr]
    assert c.delete_topic("orders") == tid
    assert c.image.topic("orders") is None and tid not in c.image.topics_by_id
    assert dict(c.image.topic_configs("orders")) == {}
    tid2 = c.create_topic("orders", 1).topic_id
    assert tid2 != tid
    assert c.delete_topic_by_id(tid2) == "orders"


def test_alter_and_incremental_alter_configs(env: Env) -> None:
    c = env.open()
    c.create_topic("orders", 1, configs={"retention.ms": "100", "cleanup.policy": "delete"})
    assert c.incremental_alter_configs(TOPIC, "orders", [
        AlterConfigOp("retention.ms", AlterConfigOpType.DELETE),
        AlterConfigOp("cleanup.policy", AlterConfigOpType.APPEND, "compact"),
        AlterConfigOp("remote.storage.enable", AlterConfigOpType.SET, "true"),
        AlterConfigOp("local.retention.ms", AlterConfigOpType.SET, "1000"),
    ]) == {"cleanup.policy": "delete,compact", "remote.storage.enable": "true", "local.retention.ms": "1000"}
    c.incremental_alter_configs(TOPIC, "orders", [AlterConfigOp("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete")])
    assert c.image.topic_configs("orders")["cleanup.policy"] == "compact"
    assert c.alter_configs(TOPIC, "orders", {"log.retention.min.timestamp": "1700000000000"}) == {
        "log.retention.min.timestamp": "1700000000000"}
    assert dict(c.image.topic_configs("orders")) == {"log.retention.min.timestamp": "1700000000000"}
    # Broker configs: cluster default ("") and per broker; seed keys included.
    c.incremental_alter_configs(BROKER, "", [AlterConfigOp("producer.id.expiration.ms", value="1000")])
    c.incremental_alter_configs(BROKER, "1", [AlterConfigOp("metadata.log.max.snapshot.interval.ms", value="5000")])
    assert c.image.effective_broker_config(1, "producer.id.expiration.ms") == "1000"
    assert c.effective_snapshot_settings().max_snapshot_interval_ms == 5000
    # No change, no record.
    end = c.metadata_log.log_end_offset
    c.incremental_alter_configs(BROKER, "", [AlterConfigOp("producer.id.expiration.ms", value="1000")])
    assert c.metadata_log.log_end_offset == end


def test_listeners_get_each_new_image(env: Env) -> None:
    c = env.open()
    seen: list[tuple[MetadataImage, MetadataDelta]] = []
    c.add_listener(lambda image, delta: seen.append((image, delta)))
    c.add_listener(lambda image, delta: 1 / 0)  # a failing listener does not stop the others
    c.create_topic("orders", 2)
    c.delete_topic("orders")
    assert len(seen) == 2
    assert seen[0][0].topic("orders") is not None and set(seen[0][1].created_topics) == {"orders"}
    assert seen[1][0] is c.image and seen[1][1].deleted_topics


def test_restart_recovers_the_same_image(env: Env) -> None:
    c = env.open()
    c.create_topic("orders", 3, configs={"retention.ms": "100"})
    c.create_topic("payments", 1)
    c.delete_topic("payments")
    c.incremental_alter_configs(BROKER, "", [AlterConfigOp("log.retention.ms", value="1000")])
    c.allocate_producer_ids()
    c.register_broker(1, bytes(range(16)))
    image = c.image
    c2 = env.reopen(c)
    assert c2.image == image
    assert c2.epoch > c.epoch


def test_producer_id_blocks_are_never_reused_across_restarts(env: Env) -> None:
    c = env.open()
    blocks = [c.allocate_producer_ids() for _ in range(3)]
    assert [b.first_producer_id for b in blocks] == [0, 1000, 2000]
    assert all(b.size == PRODUCER_ID_BLOCK_SIZE for b in blocks)
    c2 = env.reopen(c)
    after = c2.allocate_producer_ids(broker_id=1, broker_epoch=5)
    assert after.first_producer_id == 3000 and after.last_producer_id == 3999
    c2.snapshot_now()
    c3 = env.reopen(c2)
    assert c3.allocate_producer_ids().first_producer_id == 4000


def test_metadata_version_upgrade_and_unsafe_downgrade(env: Env) -> None:
    from tests.helpers.metadata import make_settings

    c = env.open(make_settings(bootstrap_version=7))
    c.set_metadata_version(21)
    assert c.image.metadata_version == 21
    c.set_metadata_version(20, allow_unsafe_downgrade=True)
    assert c.image.metadata_version == 20


def test_closed_controller_refuses_commands(env: Env) -> None:
    c = env.open()
    c.close()
    with pytest.raises(NotControllerError) as info:
        c.create_topic("orders", 1)
    assert info.value.error_code == 41


def test_collision_check_follows_creates_deletes_and_restarts(env: Env) -> None:
    c = env.open()
    c.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides with existing topic: a.b"):
        c.create_topic("a_b", 1)
    c2 = env.reopen(c)
    with pytest.raises(InvalidTopicError):
        c2.create_topic("a_b", 1)
    c2.delete_topic("a.b")
    c2.create_topic("a_b", 1)
    c2.create_topic("ab", 1)  # no collision characters, no collision
