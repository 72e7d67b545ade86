"""At startup the remote data of a partition whose topic the metadata does not know is deleted only
when its deletion had begun (DELETE_PARTITION_MARKED, written as the deletion is committed): a
broker killed before the deletion ran finishes it, and a restored metadata backup from before the
topic existed costs no remote data."""

from __future__ import annotations

from tests.helpers.tiered import Env, fill
from tierlog.metadata.image import EMPTY_IMAGE
from tierlog.server.tier_sync import TierSync
from tierlog.testing.remote import InMemoryRemoteStorageManager
from tierlog.tiered.api import RemotePartitionDeleteState, TopicIdPartition

TOPIC_ID = b"\x01" * 16
TIP = TopicIdPartition(TOPIC_ID, "t", 0)


def _tiered(env: Env) -> tuple[InMemoryRemoteStorageManager, TierSync]:
    fill(env.open_log("t-0", topic_id=TOPIC_ID), 20)
    rsm = InMemoryRemoteStorageManager()
    rlm = env.rlm(rsm)
    rlm.copy_all()
    assert rsm.segment_ids()
    return rsm, TierSync(rlm, None)


def test_an_unmarked_partition_the_metadata_does_not_know_keeps_its_remote_data(env: Env) -> None:
    rsm, sync = _tiered(env)
    before = rsm.segment_ids()
    sync.reconcile(EMPTY_IMAGE)
    assert rsm.segment_ids() == before
    assert sync.remote.rlmm.remote_partition_delete_state(TIP) is None


def test_a_marked_partition_is_deleted_at_startup(env: Env) -> None:
    rsm, sync = _tiered(env)
    assert sync.remote.mark_partition_for_deletion("t", 0, TOPIC_ID)
    sync.remote.close()
    # The broker stopped before the deletion ran; the next one finds the mark and finishes it.
    rlm = env.rlm(rsm)
    assert rlm.marked_for_deletion(TIP)
    TierSync(rlm, None).reconcile(EMPTY_IMAGE)
    assert rsm.segment_ids() == set()
    assert rlm.rlmm.remote_partition_delete_state(TIP) is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    assert not rlm.marked_for_deletion(TIP)


def test_only_partitions_with_remote_data_or_a_copy_task_are_marked(env: Env) -> None:
    _, sync = _tiered(env)
    assert not sync.remote.mark_partition_for_deletion("never-tiered", 0, b"\x02" * 16)
    assert sync.remote.rlmm.remote_partition_delete_state(TopicIdPartition(b"\x02" * 16, "never-tiered", 0)) is None
