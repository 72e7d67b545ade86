"""``partition.metadata`` (KAFKA-FACTS §2.8), and how a damaged copy of a topic id is told from another
topic's id."""

from __future__ import annotations

import re
from pathlib import Path

from tierlog._util.files import write_atomic
from tierlog.ids import ZERO_UUID, uuid_from_base64, uuid_to_base64
from tierlog.storage.checkpoints.base import (
    INT32_BOUNDS,
    PARTITION_METADATA_VERSION,
    CorruptCheckpointError,
    SingleFile,
    java_int,
    read_lines,
)

# -- Uuid ----------------------------------------------------------------------------------------------

#: Bits in which a damaged copy of a topic id may differ from the real one: four flipped base64
#: characters change at most 24. Two random (version 4) Uuids differ in 61 of their 122 random bits
#: on average; 24 or fewer happens about once in 10^11 pairs.
DAMAGED_UUID_MAX_BITS = 24


def likely_damaged_copy(stored: bytes, actual: bytes) -> bool:
    """Whether ``stored`` (read from a file) differs from ``actual`` only as a few damaged bytes
    would make it, rather than being the id of another topic."""
    distance = (int.from_bytes(stored, "big") ^ int.from_bytes(actual, "big")).bit_count()
    return 0 < distance <= DAMAGED_UUID_MAX_BITS


# -- partition.metadata --------------------------------------------------------------------------------

_PM_SEPARATOR = re.compile(r":[ \t\n\x0b\f\r]+")


class PartitionMetadataFile(SingleFile):
    """``partition.metadata``: exactly ``version: 0\\ntopic_id: <uuid>``, no trailing newline."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @staticmethod
    def encode(topic_id: bytes) -> bytes:
        return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {uuid_to_base64(topic_id)}".encode()

    def write(self, topic_id: bytes, sync: bool = True) -> None:
        if topic_id == ZERO_UUID:
            raise ValueError("the zero Uuid is not a topic id")
        write_atomic(self.path, self.encode(topic_id), sync=sync)

    def read(self) -> bytes:
        """The topic id. FileNotFoundError if missing; CorruptCheckpointError if malformed, of another
        version, or the zero Uuid."""
        data = self.path.read_bytes()
        try:
            lines = read_lines(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise CorruptCheckpointError(f"partition metadata file {self.path} is not valid UTF-8") from None
        fields = [_PM_SEPARATOR.split(line) for line in lines[:2]]
        if not fields or len(fields[0]) != 2 or fields[0][0] != "version":
            raise self._malformed(1, lines[0] if lines else "")
        version = java_int(fields[0][1], INT32_BOUNDS)
        if version is None:
            raise self._malformed(1, lines[0])
        if version != PARTITION_METADATA_VERSION:
            raise CorruptCheckpointError(f"unrecognized version {version} of partition metadata file {self.path}")
        if len(fields) < 2 or len(fields[1]) != 2 or fields[1][0] != "topic_id":
            raise self._malformed(2, lines[1] if len(lines) > 1 else "")
        try:
            topic_id = uuid_from_base64(fields[1][1])
        except ValueError as e:
            raise CorruptCheckpointError(f"invalid topic ID in partition metadata file {self.path}: {e}") from None
        if topic_id == ZERO_UUID:
            raise CorruptCheckpointError(f"invalid topic ID in partition metadata file {self.path}: the zero Uuid")
        return topic_id

    def _malformed(self, number: int, line: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"malformed line {number} in partition metadata file {self.path}: {line!r}")
