"""Durable acknowledgements (group commit) and log dirs taken offline by disk errors, with faults
injected by replacing os.fdatasync / os.pwritev (and the C write of one batch) / os.open / os.replace for one
call site."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.storage import batch
from tierlog.config import LogConfig
from tierlog.errors import KafkaStorageError
from tierlog.server.handlers.produce import durable_ack
from tierlog.storage import file_records
from tierlog.storage.log_manager import LogManager, LogManagerSettings

CFG = LogConfig()


def manager(*dirs: Path) -> LogManager:
    mgr = LogManager(list(dirs), lambda t: CFG)
    mgr.startup_logs()
    return mgr


def eio(*_: Any) -> Any:
    raise OSError(errno.EIO, "Input/output error")


def test_durable_ack_setting() -> None:
    assert [durable_ack("all", a) for a in (-1, 1, 0)] == [True, False, False]
    assert [durable_ack("1", a) for a in (-1, 1, 0)] == [True, True, False]
    assert [durable_ack("none", a) for a in (-1, 1, 0)] == [False, False, False]


def test_group_commit_shares_a_files_next_sync_and_a_slow_file_holds_no_other(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    mgr = manager(tmp_path)
    logs = [mgr.get_or_create_log("t", p) for p in range(3)]
    real = os.fdatasync
    entered, release = threading.Event(), threading.Event()
    calls: list[int] = []
    slow_fd: list[int] = []

    def slow_first(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            slow_fd.append(fd)
            entered.set()
            assert release.wait(30)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_first)
    first = mgr.sync_future(logs[0], logs[0].append_as_leader(batch()))
    assert entered.wait(30)  # partition 0's fdatasync is under way, stuck
    # Three more requests for partition 0 must wait for its next fdatasync, and share it.
    same_file = [mgr.sync_future(logs[0], logs[0].append_as_leader(batch())) for _ in range(3)]
    # Other partitions are answered meanwhile: their files' syncs do not wait for the slow one.
    others = [mgr.sync_future(ulog, ulog.append_as_leader(batch())) for ulog in (logs[1], logs[2])]
    for f in others:
        f.result(30)
    assert not first.done() and not any(f.done() for f in same_file)
    release.set()
    first.result(30)
    for f in same_file:
        f.result(30)
    stats = mgr.group_commits[tmp_path.resolve()].stats
    assert stats.requests == 6 and stats.rounds == stats.files_synced == 4
    assert calls.count(slow_fd[0]) == 2  # partition 0: the slow sync, then one shared by three requests
    assert len(calls) == 4
    assert stats.pending_bytes == 0
    # The recovery point is the flush's business, not the group commit's.
    assert all(ulog.recovery_point == 0 for ulog in logs)


def test_a_waiter_that_gave_up_does_not_stop_the_group_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A produce whose client disconnects while waiting for its fsync cancels its future (asyncio's
    wrap_future passes the cancel on). Setting a cancelled future raises: before, that killed the
    group-commit thread (librdkafka's 0088, which drops connections mid-produce, left the broker unable
    to answer acks=all), and with per-file syncs it stops the answering of the waiters after it."""
    mgr = manager(tmp_path)
    ulog = mgr.get_or_create_log("t", 0)
    real = os.fdatasync
    entered, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow_first(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            entered.set()
            assert release.wait(30)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_first)
    first = mgr.sync_future(ulog, ulog.append_as_leader(batch()))
    assert entered.wait(30)  # the first sync is under way; the next two wait for one sync together
    gone = mgr.sync_future(ulog, ulog.append_as_leader(batch()))
    kept = mgr.sync_future(ulog, ulog.append_as_leader(batch()))
    assert gone.cancel()  # its waiter gave up
    release.set()
    first.result(30)
    kept.result(30)  # answered although the waiter before it in the same sync had gone
    later = mgr.sync_future(ulog, ulog.append_as_leader(batch()))
    later.result(30)  # and the group commit goes on


def test_eio_on_fdatasync_takes_the_dir_offline_and_is_never_retried(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    mgr = manager(a, b)
    ulog_a = mgr.get_or_create_log("t", 0)
    ulog_b = mgr.get_or_create_log("t", 1)
    assert {ulog_a.dir.parent, ulog_b.dir.parent} == {a.resolve(), b.resolve()}
    if ulog_a.dir.parent != a.resolve():
        ulog_a, ulog_b = ulog_b, ulog_a
    ulog_a.append_as_leader(batch())
    ulog_a.flush()
    assert ulog_a.recovery_point == 1
    info = ulog_a.append_as_leader(batch())
    syncs: list[int] = []

    def failing(fd: int) -> None:
        syncs.append(fd)
        eio()

    monkeypatch.setattr(os, "fdatasync", failing)
    fut = mgr.sync_future(ulog_a, info)
    with pytest.raises(KafkaStorageError):
        fut.result(30)
    monkeypatch.undo()
    assert "EIO" in (mgr.failure_channel.offline_reason(a.resolve()) or "")
    assert any("log dir offline" in r.message and r.levelname == "ERROR" for r in caplog.records)
    fsyncs: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd))
    # Nothing more is appended, flushed (a second fsync would "succeed") or synced there...
    with pytest.raises(KafkaStorageError):
        ulog_a.append_as_leader(batch())
    with pytest.raises(KafkaStorageError):
        ulog_a.flush()
    with pytest.raises(KafkaStorageError):
        mgr.sync_future(ulog_a, info).result(30)
    assert fsyncs == [] and len(syncs) == 1
    assert ulog_a.recovery_point == 1  # never past the data whose fsync failed
    # ...while the other dir serves, and new partitions go there.
    monkeypatch.undo()
    mgr.sync_future(ulog_b, ulog_b.append_as_leader(batch())).result(30)
    assert mgr.get_or_create_log("t", 2).dir.parent == b.resolve()
    # The checkpoints skip the offline dir; the shutdown leaves it unclean for recovery.
    mgr.shutdown()
    assert not (a / ".kafka_cleanshutdown").exists() and (b / ".kafka_cleanshutdown").exists()
    # A restart recovers: everything acknowledged (synced) is there.
    again = manager(a, b)
    restarted = again.get_log("t", 0)
    assert restarted is not None and restarted.log_end_offset >= 1
    assert again.failure_channel.offline_dirs == {}
    again.shutdown()


def test_enospc_on_write_takes_the_dir_offline_and_the_last_dir_stops_the_broker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mgr = manager(tmp_path)
    stopped: list[str] = []
    mgr.failure_channel.on_all_offline = stopped.append
    ulog = mgr.get_or_create_log("t", 0)
    ulog.append_as_leader(batch())

    def full(*_: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwritev", full)
    # A client's one batch is written by one C call (records.header.fast_write_patched), not os.pwritev.
    monkeypatch.setattr(file_records, "fast_write_patched", full)
    with pytest.raises(KafkaStorageError, match="ENOSPC|No space"):
        ulog.append_as_leader(batch())
    assert "ENOSPC" in (mgr.failure_channel.offline_reason(tmp_path.resolve()) or "")
    assert len(stopped) == 1
    with pytest.raises(KafkaStorageError):
        mgr.get_or_create_log("t", 1)


def _failing_open(match: Callable[[str], bool], code: int, real: Callable[..., int] = os.open) -> Callable[..., int]:
    def opener(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and match(str(path)):
            raise OSError(code, os.strerror(code))
        return real(path, flags, *args, **kwargs)
    return opener


def test_enospc_while_rolling_in_an_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mgr = manager(tmp_path)
    ulog = mgr.get_or_create_log("t", 0)
    ulog.update_config(LogConfig.from_props({"segment.bytes": "1024"}, {}))
    ulog.append_as_leader(batch(value_size=600))
    monkeypatch.setattr(os, "open", _failing_open(lambda p: p.endswith(".log"), errno.ENOSPC))
    with pytest.raises(KafkaStorageError):
        ulog.append_as_leader(batch(value_size=600))
    assert "ENOSPC" in (mgr.failure_channel.offline_reason(tmp_path.resolve()) or "")
    assert ulog.log_end_offset == 1


def test_eio_on_a_checkpoint_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mgr = manager(tmp_path)
    mgr.get_or_create_log("t", 0).append_as_leader(batch())
    monkeypatch.setattr(os, "replace", eio)
    with pytest.raises(KafkaStorageError):
        mgr.checkpoint_recovery_points()
    monkeypatch.undo()
    assert "EIO" in (mgr.failure_channel.offline_reason(tmp_path.resolve()) or "")
    mgr.checkpoint_recovery_points()  # an offline dir is skipped, not written again


def test_eio_on_an_index_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The offset index is an mmap: its flush (msync) failing in a log flush takes the dir offline."""
    mgr = manager(tmp_path)
    ulog = mgr.get_or_create_log("t", 0)
    for _ in range(3):
        ulog.append_as_leader(batch(value_size=5000))
    seg = ulog.active_segment
    monkeypatch.setattr(type(seg.offset_index), "flush", eio)
    with pytest.raises(KafkaStorageError):
        ulog.flush()
    assert ulog.recovery_point == 0
    assert "EIO" in (mgr.failure_channel.offline_reason(tmp_path.resolve()) or "")


def test_a_slow_disk_makes_durable_appends_wait_and_bounds_the_bytes_waiting_for_an_fsync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """log.dir.unflushed.max.bytes: with each fdatasync taking 30 ms, writers asking room() before
    they append wait for the rounds, and the bytes waiting for a sync never pass the bound by more
    than the writers let in at once (one request each)."""
    bound = 8 << 10
    mgr = LogManager([tmp_path], lambda t: CFG, LogManagerSettings(unflushed_max_bytes=bound))
    mgr.startup_logs()
    logs = [mgr.get_or_create_log("t", p) for p in range(3)]
    real = os.fdatasync

    def slow(fd: int) -> None:
        time.sleep(0.03)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow)
    largest: list[int] = [0]
    futures: list[Any] = []

    def writer(ulog: Any) -> None:
        for _ in range(20):
            room = mgr.sync_room("t", ulog.partition)
            if room is not None:
                room.result(30)
            info = ulog.append_as_leader(batch(value_size=1000))
            largest[0] = max(largest[0], info.valid_bytes)
            futures.append(mgr.sync_future(ulog, info))

    threads = [threading.Thread(target=writer, args=(ulog,)) for ulog in logs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for f in futures:
        f.result(30)
    stats = mgr.group_commits[tmp_path.resolve()].stats
    assert stats.room_waits > 0, stats
    assert stats.peak_pending_bytes <= bound + len(logs) * largest[0], stats
    assert stats.pending_bytes == 0
    assert all(ulog.log_end_offset == 20 for ulog in logs)  # nothing lost while waiting
    mgr.shutdown()


# -- each disk error with a second dir that keeps serving, a restart, and the acknowledged records kept --


def _two_dirs(tmp_path: Path) -> tuple[LogManager, Any, Any, Path, Path]:
    """A manager over dirs a and b with partition t-0 in a and t-1 in b, each with 3 acknowledged
    (appended and group-commit synced) records."""
    a, b = tmp_path / "a", tmp_path / "b"
    mgr = manager(a, b)
    first, second = mgr.get_or_create_log("t", 0), mgr.get_or_create_log("t", 1)
    ulog_a, ulog_b = (first, second) if first.dir.parent == a.resolve() else (second, first)
    for ulog in (ulog_a, ulog_b):
        for _ in range(3):
            mgr.sync_future(ulog, ulog.append_as_leader(batch(value_size=100))).result(30)
    return mgr, ulog_a, ulog_b, a.resolve(), b.resolve()


def _serves_then_recovers(mgr: LogManager, ulog_a: Any, ulog_b: Any, a: Path, b: Path, code: str) -> None:
    assert code in (mgr.failure_channel.offline_reason(a) or "")
    assert mgr.failure_channel.offline_reason(b) is None
    with pytest.raises(KafkaStorageError):
        ulog_a.append_as_leader(batch())
    # The other dir keeps serving: appends, syncs, reads, and new partitions go there.
    mgr.sync_future(ulog_b, ulog_b.append_as_leader(batch(value_size=100))).result(30)
    assert ulog_b.log_end_offset == 4
    assert mgr.get_or_create_log("t", 9).dir.parent == b
    mgr.shutdown()
    # A restart recovers the offline dir; every acknowledged record is there.
    again = manager(a.parent / "a", b.parent / "b")
    try:
        assert again.failure_channel.offline_dirs == {}
        restarted_a, restarted_b = again.get_log("t", ulog_a.partition), again.get_log("t", ulog_b.partition)
        assert restarted_a is not None and restarted_b is not None
        assert restarted_a.log_end_offset >= 3 and restarted_b.log_end_offset == 4
        read = restarted_a.read(0, 1 << 20)
        assert read.records.size > 0
        # And the recovered dir takes appends again.
        again.sync_future(restarted_a, restarted_a.append_as_leader(batch())).result(30)
    finally:
        again.shutdown()


def _failing_pwrite(suffix: str, code: int, real: Callable[..., int] = os.pwrite) -> Callable[..., int]:
    def pwrite(fd: int, data: Any, offset: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(suffix):
            raise OSError(code, os.strerror(code))
        return real(fd, data, offset)
    return pwrite


def test_eio_writing_an_index_entry_takes_only_its_dir_offline_and_a_restart_recovers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real write of the offset index (the pwrite that backs a new index page) failing in an append."""
    mgr, ulog_a, ulog_b, a, b = _two_dirs(tmp_path)
    monkeypatch.setattr(os, "pwrite", _failing_pwrite(".index", errno.EIO))
    with pytest.raises(KafkaStorageError):
        for _ in range(3):  # past index.interval.bytes: an index entry
            ulog_a.append_as_leader(batch(value_size=5000))
    monkeypatch.undo()
    _serves_then_recovers(mgr, ulog_a, ulog_b, a, b, "EIO")


def test_eio_on_a_checkpoint_rename_takes_only_its_dir_offline_and_a_restart_recovers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mgr, ulog_a, ulog_b, a, b = _two_dirs(tmp_path)
    real = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if str(dst).startswith(str(a)):
            eio()
        real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KafkaStorageError):
        mgr.checkpoint_recovery_points()
    monkeypatch.undo()
    _serves_then_recovers(mgr, ulog_a, ulog_b, a, b, "EIO")


def test_enospc_while_rolling_takes_only_its_dir_offline_and_a_restart_recovers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mgr, ulog_a, ulog_b, a, b = _two_dirs(tmp_path)
    ulog_a.update_config(LogConfig.from_props({"segment.bytes": "1024"}, {}))
    monkeypatch.setattr(os, "open", _failing_open(lambda p: p.startswith(str(a)) and p.endswith(".log"),
                                                  errno.ENOSPC))
    with pytest.raises(KafkaStorageError):
        ulog_a.append_as_leader(batch(value_size=600))
    monkeypatch.undo()
    assert ulog_a.log_end_offset == 3
    _serves_then_recovers(mgr, ulog_a, ulog_b, a, b, "ENOSPC")


def test_produce_answers_kafka_storage_error_when_its_sync_fails(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers.server import call, with_broker
    from tierlog.errors import ErrorCode
    from tierlog.protocol import ApiKey

    async def test(ctx: Any) -> None:
        created = await call(ctx, ApiKey.CREATE_TOPICS, 7, {"topics": [
            {"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout": 30000, "validate_only": False})
        assert created.topics[0].error_code == ErrorCode.NONE

        async def produce() -> Any:
            body = await call(ctx, ApiKey.PRODUCE, 8, {"transactional_id": None, "acks": -1, "timeout": 30000,
                                                       "topic_data": [{"name": "t", "partition_data": [
                                                           {"index": 0, "records": batch()}]}]})
            return body.responses[0].partition_responses[0]

        assert (await produce()).error_code == ErrorCode.NONE
        monkeypatch.setattr(os, "fdatasync", eio)
        failed = await produce()
        assert failed.error_code == ErrorCode.KAFKA_STORAGE_ERROR and failed.base_offset == -1, failed
        monkeypatch.undo()
        # The dir is offline: later produces are refused too, never acknowledged on an unsynced disk.
        assert (await produce()).error_code == ErrorCode.KAFKA_STORAGE_ERROR

    with_broker(tmp_path, test)


def test_transaction_state_writes_wait_for_their_group_commit(tmp_path: Path) -> None:
    """Under log.durable.acks=all a __transaction_state write is on disk before InitProducerId answers."""
    from tests.helpers.server import call, with_broker
    from tierlog.errors import ErrorCode
    from tierlog.protocol import ApiKey

    async def test(ctx: Any) -> None:
        commits = ctx.log_manager.group_commits
        before = sum(c.stats.requests for c in commits.values())
        body = await call(ctx, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "tx", "transaction_timeout": 60000,
                                                            "producer_id": -1, "producer_epoch": -1})
        assert body.error_code == ErrorCode.NONE, body
        synced = sum(c.stats.requests for c in commits.values()) - before
        assert synced >= 1 and all(c.stats.pending_bytes == 0 for c in commits.values())

    with_broker(tmp_path, test, **{"log.durable.acks": "all", "transaction.state.log.num.partitions": "1"})
