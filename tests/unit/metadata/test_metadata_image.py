"""MetadataImage and MetadataDelta: replay rules, change summaries, and snapshot + tail = full replay."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.metadata_records import RecordModel, topic_id
from tierlog.metadata.delta import MetadataDelta, replay_records
from tierlog.metadata.errors import MetadataReplayError
from tierlog.metadata.image import EMPTY_IMAGE, MetadataProvenance, image_record_values, image_records
from tierlog.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tierlog.metadata.snapshot import SnapshotId, load_snapshot_data, snapshot_batches

T1 = topic_id(1)
T2 = topic_id(2)


def test_create_and_delete_topic() -> None:
    image = replay_records(EMPTY_IMAGE, [
        TopicRecord("a", T1), PartitionRecord(0, T1, (1,), (1,), 1, 0, 0), PartitionRecord(1, T1, (1,), (1,), 1, 0, 0),
        ConfigRecord(2, "a", "retention.ms", "5"),
    ])
    topic = image.topic("a")
    assert topic is not None and topic.topic_id == T1 and topic.num_partitions == 2
    assert image.topics_by_id[T1] is topic
    assert dict(image.topic_configs("a")) == {"retention.ms": "5"}
    delta = MetadataDelta(image)
    delta.replay(RemoveTopicRecord(T1))
    after = delta.apply()
    assert after.topic("a") is None and T1 not in after.topics_by_id
    # Kafka drops a deleted topic's configs with it.
    assert dict(after.topic_configs("a")) == {}
    assert set(delta.deleted_topics) == {T1}
    # The old image is untouched.
    assert image.topic("a") is topic


def test_delta_reports_changes() -> None:
    base = replay_records(EMPTY_IMAGE, [TopicRecord("a", T1), FeatureLevelRecord("metadata.version", 7)])
    delta = MetadataDelta(base)
    delta.replay_all([TopicRecord("b", T2), PartitionRecord(0, T1, (1,), (1,), 1, 0, 0),
                      ConfigRecord(4, "", "log.retention.ms", "1"), FeatureLevelRecord("metadata.version", 8)])
    assert delta.created_topics == {"b": T2}
    assert delta.changed_topic_ids == {T1, T2}
    assert delta.changed_configs == {(ConfigResourceType.BROKER, "")}
    assert delta.metadata_version_changed and delta.features_changed
    image = delta.apply()
    assert image.metadata_version == 8
    assert image.effective_broker_config(1, "log.retention.ms") == "1"


def test_first_metadata_version_is_not_a_change() -> None:
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay(FeatureLevelRecord("metadata.version", 21))
    assert not delta.metadata_version_changed
    delta = MetadataDelta(delta.apply())
    delta.replay(FeatureLevelRecord("metadata.version", 21))
    assert not delta.metadata_version_changed


def test_per_broker_config_wins_over_cluster_default() -> None:
    image = replay_records(EMPTY_IMAGE, [ConfigRecord(4, "", "x", "default"), ConfigRecord(4, "1", "x", "mine")])
    assert image.effective_broker_config(1, "x") == "mine"
    assert image.effective_broker_config(2, "x") == "default"


def test_replay_rejects_inconsistent_records() -> None:
    with pytest.raises(MetadataReplayError):
        replay_records(EMPTY_IMAGE, [PartitionRecord(0, T1, (1,), (1,), 1, 0, 0)])
    with pytest.raises(MetadataReplayError):
        replay_records(EMPTY_IMAGE, [RemoveTopicRecord(T1)])
    with pytest.raises(MetadataReplayError):
        replay_records(EMPTY_IMAGE, [TopicRecord("a", T1), TopicRecord("b", T1)])
    with pytest.raises(MetadataReplayError):
        replay_records(EMPTY_IMAGE, [ProducerIdsRecord(1, 0, 2000), ProducerIdsRecord(1, 0, 1000)])
    with pytest.raises(MetadataReplayError):
        replay_records(EMPTY_IMAGE, [ConfigRecord(99, "x", "k", "v")])


def test_image_records_rebuild_the_image() -> None:
    model = RecordModel()
    records = [r for batch in model.batches([(k, a, b) for k in range(9) for a in range(3) for b in range(4)])
               for r in batch]
    image = replay_records(EMPTY_IMAGE, records, MetadataProvenance(len(records) - 1, 2, 99))
    rebuilt = replay_records(EMPTY_IMAGE, image_records(image), image.provenance)
    assert rebuilt == image


def snapshot_of(image_offset: int, records: list, epoch: int = 1) -> bytes:
    image = replay_records(EMPTY_IMAGE, records, MetadataProvenance(image_offset, epoch, 1000 + image_offset))
    return b"".join(snapshot_batches(image_record_values(image), epoch=epoch,
                                     last_contained_timestamp_ms=image.provenance.last_append_time_ms, now_ms=5))


ops = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 4), st.integers(0, 20)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(ops=ops, split=st.integers(0, 1000))
def test_snapshot_plus_tail_equals_full_replay(ops: list[tuple[int, int, int]], split: int) -> None:
    """Replay every batch from the start, or load a snapshot taken after some of them and replay the
    rest: the images must be equal (provenance included)."""
    batches = RecordModel().batches(ops)
    if not batches:
        return
    cut = split % (len(batches) + 1)
    offsets = []
    offset = 0
    for b in batches:
        offset += len(b)
        offsets.append(offset - 1)  # last offset of each batch
    final = MetadataProvenance(offsets[-1], 1, 1000 + offsets[-1])

    full = MetadataDelta(EMPTY_IMAGE)
    for b in batches:
        full.replay_all(b)
    full.set_provenance(final)
    full_image = full.apply()

    head = [r for b in batches[:cut] for r in b]
    if cut == 0:
        start = EMPTY_IMAGE
    else:
        data = snapshot_of(offsets[cut - 1], head)
        start = load_snapshot_data(data, SnapshotId(offsets[cut - 1] + 1, 1)).image
        assert start.provenance == MetadataProvenance(offsets[cut - 1], 1, 1000 + offsets[cut - 1])
    tail = MetadataDelta(start)
    for b in batches[cut:]:
        tail.replay_all(b)
    tail.set_provenance(final)
    assert tail.apply() == full_image


def test_replay_value_fast_path_matches_record_replay() -> None:
    from tierlog.metadata.records import encode_record

    records = [TopicRecord("a", T1), PartitionRecord(0, T1, (1,), (1,), 1, 0, 0),
               PartitionRecord(1, T1, (1, 2), (2,), 2, 3, 4, (5,), (6, 7)),
               PartitionRecord(2, T1, (), (), -1, 0, 0, leader_recovery_state=1),  # tagged: general path
               PartitionRecord(3, T1, tuple(range(40)), (1,), 1, 0, 0)]  # long array: general path
    by_value = MetadataDelta(EMPTY_IMAGE)
    for r in records:
        by_value.replay_value(encode_record(r))
    assert by_value.apply() == replay_records(EMPTY_IMAGE, records)
