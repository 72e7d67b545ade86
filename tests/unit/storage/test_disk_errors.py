"""An OSError inside storage leaves it as KafkaStorageError (code 56): the storage boundary maps disk
errors once, so the server answers them through the one exception → error-code mapping."""

from __future__ import annotations

import os

import pytest

from tests.helpers.storage import OpenLog, batch
from tierlog.errors import ErrorCode, KafkaStorageError, error_code_of
from tierlog.storage.io_errors import disk_errors


def test_the_decorator_keeps_the_message_and_the_cause() -> None:
    @disk_errors
    def fails() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(KafkaStorageError) as info:
        fails()
    assert str(info.value) == "[Errno 28] No space left on device"
    assert isinstance(info.value.__cause__, OSError)
    assert error_code_of(info.value) == ErrorCode.KAFKA_STORAGE_ERROR


def test_a_failing_disk_under_a_log_is_a_storage_error(open_log: OpenLog) -> None:
    ulog = open_log()
    ulog.append_as_leader(batch(3), 0)
    active = ulog.active_segment
    # The segment file's descriptor is gone: every read or write of it fails with EBADF, as it
    # would on a disk that went away.
    os.close(active.log.fd)
    try:
        with pytest.raises(KafkaStorageError):
            ulog.append_as_leader(batch(1), 0)
        with pytest.raises(KafkaStorageError):
            ulog.read(0, 1 << 20).read_bytes()
        with pytest.raises(KafkaStorageError):
            ulog.flush()
    finally:
        active.log._fd = None  # closed above; the log's close must not close a reused number
