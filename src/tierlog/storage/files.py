"""Names of the files and directories of a Kafka log directory (KAFKA-FACTS §2.1).

Everything here is pure string and path arithmetic; nothing touches the disk. The names must be
exactly Kafka's, because a log directory written by Kafka has to open in tierlog and the reverse.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

#: Kafka caps a renamed partition directory at this many characters by shortening the topic.
MAX_DIR_NAME_LENGTH = 255

_OFFSET_DIGITS = 20
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

_DIGITS = re.compile(r"[0-9]+")
# `<topic>-<partition>.<unique id><suffix>`; \S mirrors Kafka's patterns, which is all that
# distinguishes a marked directory from a topic whose name merely ends in "-delete".
_MARKED_DIR = re.compile(r"(\S+)-(\S+)\.(\S+)(-delete|-future|-stray)")


def filename_prefix_from_offset(offset: int) -> str:
    """The 20-digit zero-padded decimal Kafka uses for segment and snapshot file names."""
    if offset < 0 or offset > _INT64_MAX:
        raise ValueError(f"offset {offset} cannot name a file: it must be in [0, 2^63)")
    return f"{offset:0{_OFFSET_DIGITS}d}"


def offset_from_file_name(name: str) -> int:
    """The offset a segment, index or snapshot file is named after: the text before the first '.'.

    Works for marked names too (``…0042.log.deleted`` → 42). Raises ValueError on anything else.
    """
    dot = name.find(".")
    if dot <= 0:
        raise ValueError(f"{name!r} is not a segment or snapshot file name (no offset before a '.')")
    digits = name[:dot]
    if not _DIGITS.fullmatch(digits):
        raise ValueError(f"{name!r} is not a segment or snapshot file name ({digits!r} is not an offset)")
    value = int(digits)
    if value > _INT64_MAX:
        raise ValueError(f"{name!r} names an offset beyond 2^63 - 1")
    return value


def offset_from_file(path: Path) -> int:
    return offset_from_file_name(path.name)


def _file(directory: Path, offset: int, suffix: str, marker: str) -> Path:
    return directory / f"{filename_prefix_from_offset(offset)}{suffix}{marker}"


def log_file(directory: Path, offset: int, marker: str = "") -> Path:
    """``<dir>/<20d>.log`` plus an optional marker suffix such as :data:`DELETED_SUFFIX`."""
    return _file(directory, offset, LOG_SUFFIX, marker)


def index_file(directory: Path, offset: int, marker: str = "") -> Path:
    return _file(directory, offset, INDEX_SUFFIX, marker)


def time_index_file(directory: Path, offset: int, marker: str = "") -> Path:
    return _file(directory, offset, TIME_INDEX_SUFFIX, marker)


def txn_index_file(directory: Path, offset: int, marker: str = "") -> Path:
    return _file(directory, offset, TXN_INDEX_SUFFIX, marker)


def producer_snapshot_file(directory: Path, offset: int, marker: str = "") -> Path:
    """A producer snapshot is named after its exclusive end offset, not a segment base offset."""
    return _file(directory, offset, SNAPSHOT_SUFFIX, marker)


def with_marker(path: Path, marker: str) -> Path:
    """``path`` with ``marker`` (``.deleted``, ``.cleaned``, ``.swap``) appended to its name."""
    return path.with_name(path.name + marker)


def without_marker(path: Path, marker: str) -> Path:
    """``path`` with a trailing ``marker`` removed; ValueError if the name does not end with it."""
    if not path.name.endswith(marker) or len(path.name) == len(marker):
        raise ValueError(f"{path} does not end with {marker!r}")
    return path.with_name(path.name[: -len(marker)])


# -- partition directories ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionDirName:
    """A parsed partition directory name. ``marker`` is "" for a live partition, otherwise one of
    :data:`DELETE_DIR_SUFFIX`, :data:`FUTURE_DIR_SUFFIX`, :data:`STRAY_DIR_SUFFIX`."""

    topic: str
    partition: int
    marker: str = ""


def _split_topic_partition(name: str, whole: str) -> tuple[str, int]:
    dash = name.rfind("-")
    topic, partition_text = name[:dash], name[dash + 1 :]
    if dash < 0 or not topic or not _DIGITS.fullmatch(partition_text):
        raise ValueError(
            f"directory {whole!r} is not in the form topic-partition or topic-partition.uniqueId-delete"
        )
    partition = int(partition_text)
    if partition > _INT32_MAX:
        raise ValueError(f"directory {whole!r} names partition {partition_text}, beyond int32")
    return topic, partition


def parse_log_dir_name(dir_name: str) -> PartitionDirName:
    """Parse any partition directory name, including ``-delete``/``-future``/``-stray`` ones
    (LocalLog.parseTopicPartitionName). ValueError on garbage."""
    for marker in (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX):
        if dir_name.endswith(marker):
            if not _MARKED_DIR.fullmatch(dir_name):
                raise ValueError(f"directory {dir_name!r} ends with {marker!r} but is not topic-partition.uniqueId{marker}")
            topic, partition = _split_topic_partition(dir_name[: dir_name.rfind(".")], dir_name)
            return PartitionDirName(topic, partition, marker)
    topic, partition = _split_topic_partition(dir_name, dir_name)
    return PartitionDirName(topic, partition)


def parse_topic_partition_name(dir_name: str) -> tuple[str, int]:
    """``(topic, partition)`` of a live partition directory ``<topic>-<partition>``.

    Unlike Kafka's parser this rejects ``-delete``, ``-future`` and ``-stray`` directories with
    ValueError, so a caller cannot mistake a directory awaiting deletion for a live log; use
    :func:`parse_log_dir_name` to parse those.
    """
    parsed = parse_log_dir_name(dir_name)
    if parsed.marker:
        raise ValueError(f"directory {dir_name!r} is marked {parsed.marker!r}, not a live partition")
    return parsed.topic, parsed.partition


def topic_partition_dir_name(topic: str, partition: int) -> str:
    if not topic or partition < 0:
        raise ValueError(f"invalid topic partition {topic!r}-{partition}")
    return f"{topic}-{partition}"


def _marked_dir_name(topic: str, partition: int, marker: str, unique_id: str | None) -> str:
    if not topic or partition < 0:
        raise ValueError(f"invalid topic partition {topic!r}-{partition}")
    uid = unique_id if unique_id is not None else uuid.uuid4().hex
    suffix = f"-{partition}.{uid}{marker}"
    # Kafka shortens the topic, never the suffix, so the name stays parseable within 255 chars.
    return topic[: max(0, MAX_DIR_NAME_LENGTH - len(suffix))] + suffix


def delete_dir_name(topic: str, partition: int, unique_id: str | None = None) -> str:
    """``<topic>-<partition>.<uuid without dashes>-delete``, topic shortened to fit 255 chars."""
    return _marked_dir_name(topic, partition, DELETE_DIR_SUFFIX, unique_id)


def future_dir_name(topic: str, partition: int, unique_id: str | None = None) -> str:
    return _marked_dir_name(topic, partition, FUTURE_DIR_SUFFIX, unique_id)


def stray_dir_name(topic: str, partition: int, unique_id: str | None = None) -> str:
    return _marked_dir_name(topic, partition, STRAY_DIR_SUFFIX, unique_id)
