"""The behaviour every RemoteLogMetadataManager must have (Kafka's RemoteLogMetadataManager contract
and RemoteLogMetadataCache rules, KAFKA-FACTS §5): state transitions checked, only COPY_SEGMENT_FINISHED
segments served to reads, deleted segments gone, everything kept across a restart. A store's test
class subclasses :class:`RemoteLogMetadataManagerContract` and provides the ``store`` fixture and
:meth:`~RemoteLogMetadataManagerContract.restart`; every test here then runs against it (the file
store the broker runs and the in-memory one of ``tierlog.testing``)."""

from __future__ import annotations

from typing import Any

import pytest

from tierlog.errors import KafkaStorageError
from tierlog.ids import random_uuid
from tierlog.tiered.api import (
    InvalidStateTransitionError,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

S = RemoteLogSegmentState
TIP = TopicIdPartition(b"\x02" * 16, "t", 0)
OTHER = TopicIdPartition(b"\x03" * 16, "u", 1)


def md(start: int, end: int, tip: TopicIdPartition = TIP, epochs: tuple[tuple[int, int], ...] | None = None,
       ) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, random_uuid()), start, end, 1000 + start, 1, 5,
                                    end - start + 1, epochs or ((0, start),), S.COPY_SEGMENT_STARTED)


def update(m: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, custom: bytes | None = None,
           rejected: bytes | None = None) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(m.segment_id, 9, state, 1, custom, rejected)


def finish(store: RemoteLogMetadataManager, m: RemoteLogSegmentMetadata, custom: bytes | None = None) -> None:
    store.add_remote_log_segment_metadata(m)
    store.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED, custom))


def view(store: RemoteLogMetadataManager, tip: TopicIdPartition = TIP) -> list[tuple[Any, ...]]:
    return [(m.start_offset, m.state, m.custom_metadata, m.rejected_custom_metadata)
            for m in store.list_remote_log_segments(tip)]


class RemoteLogMetadataManagerContract:
    @pytest.fixture
    def store(self) -> RemoteLogMetadataManager:  # pragma: no cover - every store overrides it
        raise NotImplementedError

    def restart(self, store: RemoteLogMetadataManager) -> RemoteLogMetadataManager:  # pragma: no cover
        """Close ``store`` and load what it made durable, as a broker restart does."""
        raise NotImplementedError

    def test_new_segments_start_as_copy_started_once(self, store: RemoteLogMetadataManager) -> None:
        a = md(0, 99)
        store.add_remote_log_segment_metadata(a)
        with pytest.raises(InvalidStateTransitionError):
            store.add_remote_log_segment_metadata(a)
        with pytest.raises(InvalidStateTransitionError):
            store.add_remote_log_segment_metadata(RemoteLogSegmentMetadata(
                RemoteLogSegmentId(TIP, random_uuid()), 100, 199, 0, 1, 5, 100, ((0, 100),), S.COPY_SEGMENT_FINISHED))
        assert view(store) == [(0, S.COPY_SEGMENT_STARTED, None, None)]

    def test_updates_follow_kafkas_transitions(self, store: RemoteLogMetadataManager) -> None:
        a = md(0, 99)
        with pytest.raises(InvalidStateTransitionError):
            store.update_remote_log_segment_metadata(update(a, S.COPY_SEGMENT_FINISHED))  # unknown segment
        store.add_remote_log_segment_metadata(a)
        with pytest.raises(InvalidStateTransitionError):
            store.update_remote_log_segment_metadata(update(a, S.DELETE_SEGMENT_FINISHED))
        store.update_remote_log_segment_metadata(update(a, S.COPY_SEGMENT_FINISHED, b"cm"))
        store.update_remote_log_segment_metadata(update(a, S.DELETE_SEGMENT_STARTED))
        with pytest.raises(InvalidStateTransitionError):
            store.update_remote_log_segment_metadata(update(a, S.COPY_SEGMENT_FINISHED))
        # An update carries the custom metadata of the state it moves to (Kafka's createWithUpdates).
        assert view(store) == [(0, S.DELETE_SEGMENT_STARTED, None, None)]

    def test_reads_see_only_finished_segments(self, store: RemoteLogMetadataManager) -> None:
        a, b = md(0, 99), md(100, 199)
        store.add_remote_log_segment_metadata(a)
        store.add_remote_log_segment_metadata(b)
        assert store.remote_log_segment_metadata(TIP, 50) is None
        store.update_remote_log_segment_metadata(update(a, S.COPY_SEGMENT_FINISHED, b"cm"))
        found = store.remote_log_segment_metadata(TIP, 50)
        assert found is not None and found.segment_id == a.segment_id and found.custom_metadata == b"cm"
        assert store.remote_log_segment_metadata(TIP, 99) == found
        assert store.remote_log_segment_metadata(TIP, 100) is None  # b is not finished
        assert store.remote_log_size(TIP) == 100
        assert [m.start_offset for m in store.list_remote_log_segments(TIP)] == [0, 100]

    def test_leader_epochs_select_segments(self, store: RemoteLogMetadataManager) -> None:
        finish(store, md(0, 99, epochs=((0, 0), (1, 50))))
        finish(store, md(100, 199, epochs=((1, 100), (2, 150))))
        assert store.remote_log_segment_metadata(TIP, 10, leader_epoch=1) is not None
        assert store.remote_log_segment_metadata(TIP, 10, leader_epoch=3) is None
        assert store.highest_offset_for_epoch(TIP, 0) == 49
        assert store.highest_offset_for_epoch(TIP, 1) == 149
        assert store.highest_offset_for_epoch(TIP, 2) == 199
        assert store.highest_offset_for_epoch(TIP, 7) is None
        assert [m.start_offset for m in store.list_remote_log_segments(TIP, leader_epoch=2)] == [100]

    def test_deleted_segments_are_gone(self, store: RemoteLogMetadataManager) -> None:
        a, b = md(0, 99), md(100, 199)
        finish(store, a)
        finish(store, b)
        store.update_remote_log_segment_metadata(update(a, S.DELETE_SEGMENT_STARTED, rejected=b"big"))
        assert view(store)[0] == (0, S.DELETE_SEGMENT_STARTED, None, b"big")
        assert store.remote_log_segment_metadata(TIP, 50) is None and store.remote_log_size(TIP) == 100
        store.update_remote_log_segment_metadata(update(a, S.DELETE_SEGMENT_FINISHED))
        assert [m.start_offset for m in store.list_remote_log_segments(TIP)] == [100]
        with pytest.raises(InvalidStateTransitionError):
            store.update_remote_log_segment_metadata(update(a, S.DELETE_SEGMENT_STARTED))

    def test_partitions_do_not_mix(self, store: RemoteLogMetadataManager) -> None:
        finish(store, md(0, 99))
        finish(store, md(0, 9, tip=OTHER))
        assert sorted(store.partitions()) == sorted([TIP, OTHER])
        assert store.remote_log_size(TIP) == 100 and store.remote_log_size(OTHER) == 10
        assert view(store, OTHER) == [(0, S.COPY_SEGMENT_FINISHED, None, None)]

    def test_log_start_offset_only_rises(self, store: RemoteLogMetadataManager) -> None:
        assert store.log_start_offset(TIP) is None
        store.update_log_start_offset(TIP, 200, 1)
        store.update_log_start_offset(TIP, 100, 2)
        assert store.log_start_offset(TIP) == 200
        assert store.log_start_offset(OTHER) is None

    def test_partition_deletion_state_is_the_latest(self, store: RemoteLogMetadataManager) -> None:
        assert store.remote_partition_delete_state(TIP) is None
        for state in (RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                      RemotePartitionDeleteState.DELETE_PARTITION_STARTED):
            store.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(TIP, state, 8, 1))
        assert store.remote_partition_delete_state(TIP) is RemotePartitionDeleteState.DELETE_PARTITION_STARTED

    def test_a_restart_keeps_everything(self, store: RemoteLogMetadataManager) -> None:
        segments = [md(i * 100, i * 100 + 99) for i in range(4)]
        for s in segments:
            finish(store, s, b"c%d" % s.start_offset)
        store.update_remote_log_segment_metadata(update(segments[0], S.DELETE_SEGMENT_STARTED))
        store.update_remote_log_segment_metadata(update(segments[0], S.DELETE_SEGMENT_FINISHED))
        store.update_remote_log_segment_metadata(update(segments[1], S.DELETE_SEGMENT_STARTED, rejected=b"r"))
        store.add_remote_log_segment_metadata(md(400, 499))
        store.update_log_start_offset(TIP, 200, 1)
        store.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
            OTHER, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 8, 1))
        before = view(store)
        again = self.restart(store)
        assert view(again) == before == [
            (100, S.DELETE_SEGMENT_STARTED, None, b"r"), (200, S.COPY_SEGMENT_FINISHED, b"c200", None),
            (300, S.COPY_SEGMENT_FINISHED, b"c300", None), (400, S.COPY_SEGMENT_STARTED, None, None)]
        assert again.log_start_offset(TIP) == 200
        assert again.remote_partition_delete_state(OTHER) is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
        # and it carries on from there
        again.update_remote_log_segment_metadata(update(segments[1], S.DELETE_SEGMENT_FINISHED))
        assert [m.start_offset for m in again.list_remote_log_segments(TIP)] == [200, 300, 400]

    def test_a_refused_change_leaves_nothing_behind(self, store: RemoteLogMetadataManager) -> None:
        a = md(0, 99)
        finish(store, a)
        with pytest.raises(InvalidStateTransitionError):
            store.update_remote_log_segment_metadata(update(a, S.DELETE_SEGMENT_FINISHED))
        assert view(self.restart(store)) == [(0, S.COPY_SEGMENT_FINISHED, None, None)]

    def test_a_closed_store_refuses_writes(self, store: RemoteLogMetadataManager) -> None:
        store.close()
        with pytest.raises(KafkaStorageError):
            store.add_remote_log_segment_metadata(md(0, 99))

    # -- remote compaction's swap (issue 18) ------------------------------------------------------

    def _replacement(self, store: RemoteLogMetadataManager, olds: list[RemoteLogSegmentMetadata]
                     ) -> RemoteLogSegmentMetadata:
        from dataclasses import replace
        new = replace(md(olds[0].start_offset, olds[-1].end_offset), replaces=tuple(m.segment_id for m in olds))
        store.add_remote_log_segment_metadata(new)
        return new

    def test_a_replacement_swaps_in_one_step(self, store: RemoteLogMetadataManager) -> None:
        a, b, c = md(0, 99), md(100, 199), md(200, 299)
        for m in (a, b, c):
            finish(store, m, b"plugin-" + bytes([m.start_offset // 100]))
        new = self._replacement(store, [a, b])
        # Before the swap: readers see the old generation whole, the upload is STARTED only.
        assert store.remote_log_segment_metadata(TIP, 150) is not None
        assert store.remote_log_segment_metadata(TIP, 150).segment_id == b.segment_id  # type: ignore[union-attr]
        store.update_remote_log_segment_metadata(update(new, S.COPY_SEGMENT_FINISHED, b"new"))
        # After: the new segment serves every offset of the range, the old ones are being deleted and
        # keep their own custom metadata (the plugin needs it to find their objects).
        for offset in (0, 99, 100, 199):
            assert store.remote_log_segment_metadata(TIP, offset).segment_id == new.segment_id  # type: ignore[union-attr]
        states = {m.segment_id: (m.state, m.custom_metadata) for m in store.list_remote_log_segments(TIP)}
        assert states[a.segment_id] == (S.DELETE_SEGMENT_STARTED, b"plugin-\x00")
        assert states[b.segment_id] == (S.DELETE_SEGMENT_STARTED, b"plugin-\x01")
        assert states[c.segment_id] == (S.COPY_SEGMENT_FINISHED, b"plugin-\x02")
        assert store.remote_log_size(TIP) == new.segment_size_in_bytes + c.segment_size_in_bytes
        store = self.restart(store)
        states = {m.segment_id: m.state for m in store.list_remote_log_segments(TIP)}
        assert states == {a.segment_id: S.DELETE_SEGMENT_STARTED, b.segment_id: S.DELETE_SEGMENT_STARTED,
                          c.segment_id: S.COPY_SEGMENT_FINISHED, new.segment_id: S.COPY_SEGMENT_FINISHED}
        [reloaded] = [m for m in store.list_remote_log_segments(TIP) if m.segment_id == new.segment_id]
        assert reloaded.replaces == (a.segment_id, b.segment_id)

    def test_a_replacement_is_refused_when_a_replaced_segment_went(self, store: RemoteLogMetadataManager) -> None:
        a, b = md(0, 99), md(100, 199)
        finish(store, a)
        finish(store, b)
        new = self._replacement(store, [a, b])
        store.update_remote_log_segment_metadata(update(a, S.DELETE_SEGMENT_STARTED))  # retention meanwhile
        with pytest.raises(InvalidStateTransitionError):
            store.update_remote_log_segment_metadata(update(new, S.COPY_SEGMENT_FINISHED))
        # Nothing changed: b still serves, the upload is still STARTED (its job deletes it).
        assert store.remote_log_segment_metadata(TIP, 150).segment_id == b.segment_id  # type: ignore[union-attr]
        assert {m.segment_id: m.state for m in store.list_remote_log_segments(TIP)}[new.segment_id] \
            is S.COPY_SEGMENT_STARTED
        store = self.restart(store)
        assert store.remote_log_segment_metadata(TIP, 150).segment_id == b.segment_id  # type: ignore[union-attr]
