"""The metadata log is the controller's own, written only as record batch v2 (KRaft reads nothing
else), so a batch of another magic there is damage wherever it lies: a flipped magic byte (outside
the CRC) in the last batch, where no v2 batch after it says so, is truncated at like any damage and
the broker starts with the records before it -- not refused as "a newer record format", which left
the broker unable to start (disk-damage rounds). A data partition still refuses such a batch
(tests/unit/storage/test_unsupported_format.py): there it may be a newer broker's data."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.metadata import Env
from tests.helpers.records import legacy_message
from tierlog.metadata.metadata_log import MetadataLog
from tierlog.records import iter_headers
from tierlog.records.header import MAGIC

SEGMENT = "00000000000000000000.log"


def _metadata_dir(tmp_path: Path) -> Path:
    """A metadata log with one batch per created topic (t0..t3), the controller closed."""
    env = Env(tmp_path)
    c = env.open()
    for i in range(4):
        c.create_topic(f"t{i}", 1)
    env.close_all()
    return env.dir


def _topics(directory: Path) -> tuple[set[str], bool]:
    mlog, result = MetadataLog.open(directory)
    try:
        return set(result.image.topics_by_name), result.lost_records
    finally:
        mlog.close()


@pytest.mark.parametrize("magic", [0, 1, 3, 77, 255])
def test_a_wrong_magic_in_the_last_metadata_batch_is_damage_truncated_not_a_newer_format(
        tmp_path: Path, magic: int) -> None:
    directory = _metadata_dir(tmp_path)
    segment = directory / SEGMENT
    data = bytearray(segment.read_bytes())
    last = list(iter_headers(bytes(data)))[-1]
    data[last.position + MAGIC] = magic  # its CRC-32C still holds: the CRC starts after the magic
    segment.write_bytes(bytes(data))
    topics, lost = _topics(directory)
    # The batch that created t3 is gone, with everything before it kept, and the loss is said.
    assert topics == {"t0", "t1", "t2"} and lost
    assert segment.stat().st_size == last.position


def test_an_intact_message_of_magic_1_after_the_metadata_batches_is_damage_too(tmp_path: Path) -> None:
    """In a data partition an intact old-format message refuses the partition; KRaft never wrote
    one into the metadata log, so there it is damage."""
    directory = _metadata_dir(tmp_path)
    segment = directory / SEGMENT
    size = segment.stat().st_size
    end_offset = list(iter_headers(segment.read_bytes()))[-1].last_offset + 1
    with segment.open("ab") as f:
        f.write(legacy_message(end_offset, b"old"))
    topics, lost = _topics(directory)
    assert topics == {"t0", "t1", "t2", "t3"} and lost
    assert segment.stat().st_size == size
