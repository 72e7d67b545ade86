"""The S3 server going away in the middle of an upload: nothing that is not in the remote tier is
deleted locally, copying resumes when the server is back, nothing is lost, and after retention no
object is left in the bucket."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.tiered import T0, MotoServer, batch, s3_props, tiered_config
from tierlog.tiered.api import RemoteLogSegmentState, TopicIdPartition
from tierlog.tiered.backends.s3 import S3RemoteStorageManager

S = RemoteLogSegmentState
TIP = TopicIdPartition(b"\x01" * 16, "t", 0)


@pytest.fixture
def own_moto(moto_server: MotoServer) -> Iterator[MotoServer]:
    """A server of its own, since this test stops it (moto's objects survive a restart in-process)."""
    server = MotoServer()
    yield server
    server.stop()


def test_server_stopped_mid_upload_loses_nothing_and_leaves_no_orphans(
        env: Any, own_moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    import obstore

    own_moto.create_bucket("faults")
    ulog = env.open_log(config=tiered_config(**{"local.retention.bytes": 1}))
    for i in range(30):
        ulog.append_as_leader(batch(3, ts=T0 + i * 1000, seed=i))
    bases = ulog.segments.base_offsets
    expected = {o: ulog.read(o, 10**6).read_bytes() for o in range(ulog.log_end_offset)}
    rsm = S3RemoteStorageManager()
    rsm.configure(s3_props(own_moto, "faults"))
    rlm = env.rlm(rsm)

    real_put = obstore.put
    puts = [0]

    def put_then_crash(*args: Any, **kwargs: Any) -> Any:
        puts[0] += 1
        if puts[0] == 9:  # the third object of the second segment
            own_moto.stop()
        return real_put(*args, **kwargs)

    monkeypatch.setattr(obstore, "put", put_then_crash)
    assert rlm.copy_all() == 1
    [status] = rlm.status()
    assert status.consecutive_failures == 1 and status.last_error
    states = [m.state for m in rlm.rlmm.list_remote_log_segments(TIP)]
    assert states == [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED]  # the cleanup failed too: kept to retry
    ulog.delete_old_segments()
    assert ulog.segments.base_offsets == bases[1:]  # only the segment that is remote went

    # still down: another attempt changes nothing and deletes nothing
    assert rlm.copy_all() == 0
    assert rlm.expire_all() == 0
    ulog.delete_old_segments()
    assert ulog.segments.base_offsets == bases[1:]

    own_moto.start()
    for _ in range(3):  # a pooled connection to the old server may fail once
        env.clock.advance(4000)  # failed deletes are retried with backoff (1 s interval, doubling)
        rlm.expire_all()
        rlm.copy_all()
        if len(list(rlm.rlmm.list_remote_log_segments(TIP))) == len(bases) - 1:
            break
    done = list(rlm.rlmm.list_remote_log_segments(TIP))
    assert [m.state for m in done] == [S.COPY_SEGMENT_FINISHED] * (len(bases) - 1)
    keys = rsm.list_keys()
    assert len(keys) == 5 * len(done)  # no txn index here; the half upload is gone
    ulog.delete_old_segments()
    assert ulog.segments.base_offsets == bases[-1:]
    for offset, data in expected.items():
        if offset < bases[-1]:
            assert rlm.read("t", 0, offset, 10**6) == data

    # total retention empties the remote tier: no orphan objects
    ulog.update_config(tiered_config(**{"retention.ms": 0}))
    rlm.expire_all()
    assert list(rlm.rlmm.list_remote_log_segments(TIP)) == []
    assert rsm.list_keys() == []
