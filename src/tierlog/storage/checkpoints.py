"""The small text files of a log directory, written exactly as Kafka writes them.

* Offset checkpoints (``recovery-point-offset-checkpoint`` and friends) and the per-partition
  ``leader-epoch-checkpoint``: Kafka's generic ``CheckpointFile`` (KAFKA-FACTS §2.7).
* ``partition.metadata`` (§2.8) and the 16-byte Uuid's string form.
* ``meta.properties`` (§2.10), in ``java.util.Properties.store`` syntax.
* ``.kafka_cleanshutdown`` (§2.9).

Every write goes to ``<name>.tmp``, is fsynced, and is renamed over the file, so a crash leaves the
old or the new file, never a torn one. Reads are strict: a file Kafka would refuse raises
:class:`CorruptCheckpointError` naming the file and line, because silently reading a damaged
recovery point could skip recovery of data that needs it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from tierlog._util.files import write_atomic
from tierlog._util.properties import PropertiesError, format_properties, read_properties
from tierlog.clock import SYSTEM_CLOCK
from tierlog.errors import KafkaStorageError, TierlogError
from tierlog.ids import ZERO_UUID, TopicPartition, is_uuid_text, uuid_from_base64, uuid_to_base64
from tierlog.storage.leader_epoch import EpochEntry

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"

OFFSET_CHECKPOINT_VERSION = 0
LEADER_EPOCH_CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0
CLEAN_SHUTDOWN_VERSION = 0

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

T = TypeVar("T")


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint, metadata or properties file that cannot be read; the message names the file
    and, where there is one, the line. A storage error: Kafka takes the log dir offline for it."""


# -- Java parsing rules ------------------------------------------------------------------------------

# BufferedReader.readLine ends a line at \n, \r or \r\n, and nothing else (str.splitlines would
# also split on \v, \f, \x1c…, which Java keeps inside the line).
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Java's \s: space, \t, \n, \x0B, \f, \r.
_JAVA_WS = re.compile(r"[ \t\n\x0b\f\r]+")
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def _read_lines(text: str) -> list[str]:
    if not text:
        return []
    lines = _LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()  # the terminator of the last line does not start another
    return lines


def _java_split_ws(line: str) -> list[str]:
    """``Pattern.compile("\\s+").split(line)``: a leading separator yields an empty first field and
    trailing empty fields are dropped."""
    parts = _JAVA_WS.split(line)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def _java_int(text: str, bounds: tuple[int, int]) -> int | None:
    """``Integer.parseInt``/``Long.parseLong``: optional sign, ASCII digits, no spaces; None if not."""
    if not _JAVA_INT.fullmatch(text):
        return None
    value = int(text)
    return value if bounds[0] <= value <= bounds[1] else None


# -- the generic checkpoint file ---------------------------------------------------------------------


class CheckpointFile(Generic[T]):
    """Kafka's text checkpoint: a version line, a count line, then one entry per line.

    ``to_line`` formats an entry; ``from_line`` parses one and returns None (or raises ValueError)
    for a malformed line. A missing file reads as empty (Kafka creates it empty on open; tierlog does
    not create files just by reading them).
    """

    def __init__(
        self,
        path: Path,
        version: int,
        to_line: Callable[[T], str],
        from_line: Callable[[str], T | None],
    ) -> None:
        self.path = Path(path)
        self.version = version
        self._to_line = to_line
        self._from_line = from_line

    def encode(self, entries: Iterable[T]) -> bytes:
        entries = list(entries)
        lines = [str(self.version), str(len(entries))]
        lines.extend(self._to_line(e) for e in entries)
        return ("\n".join(lines) + "\n").encode("utf-8")

    def write(self, entries: Iterable[T], sync: bool = True) -> None:
        write_atomic(self.path, self.encode(entries), sync=sync)

    def write_if_dir_exists(self, entries: Iterable[T]) -> bool:
        """Write unless the directory is gone (a partition deleted while a write was queued)."""
        if not self.path.parent.is_dir():
            return False
        try:
            self.write(entries)
        except FileNotFoundError:
            return False
        return True

    def read(self) -> list[T]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return self.decode(data)

    def decode(self, data: bytes) -> list[T]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptCheckpointError(f"checkpoint file {self.path} is not valid UTF-8: {e}") from None
        lines = _read_lines(text)
        if not lines:
            return []
        version = _java_int(lines[0], _INT32)
        if version is None:
            raise self._malformed(1, lines[0])
        if version != self.version:
            raise CorruptCheckpointError(
                f"unrecognised version {version} (expected {self.version}) in checkpoint file {self.path}"
            )
        if len(lines) == 1:
            return []
        expected = _java_int(lines[1], _INT32)
        if expected is None:
            raise self._malformed(2, lines[1])
        entries: list[T] = []
        for number, line in enumerate(lines[2:], start=3):
            try:
                entry = self._from_line(line)
            except ValueError:
                entry = None
            if entry is None:
                raise self._malformed(number, line)
            entries.append(entry)
        if len(entries) != expected:
            raise CorruptCheckpointError(
                f"expected {expected} entries in checkpoint file {self.path}, but found {len(entries)}"
            )
        return entries

    def _malformed(self, number: int, line: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"malformed line {number} in checkpoint file {self.path}: {line!r}")


# -- offset checkpoints ------------------------------------------------------------------------------



def _offset_to_line(entry: tuple[TopicPartition, int]) -> str:
    (topic, partition), offset = entry
    if not topic or _JAVA_WS.search(topic):
        raise ValueError(f"topic {topic!r} cannot be written to a checkpoint")
    return f"{topic} {partition} {offset}"


def _offset_from_line(line: str) -> tuple[TopicPartition, int] | None:
    parts = _java_split_ws(line)
    if len(parts) != 3:
        return None
    partition, offset = _java_int(parts[1], _INT32), _java_int(parts[2], _INT64)
    if partition is None or offset is None:
        return None
    return (parts[0], partition), offset


class OffsetCheckpointFile:
    """``topic partition offset`` lines, version 0: the recovery point, log start offset,
    replication (high watermark) and cleaner checkpoints of a log directory."""

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[TopicPartition, int]] = CheckpointFile(
            path, OFFSET_CHECKPOINT_VERSION, _offset_to_line, _offset_from_line
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[TopicPartition, int], sync: bool = True) -> None:
        self._file.write(offsets.items(), sync)

    def write_if_dir_exists(self, offsets: Mapping[TopicPartition, int]) -> bool:
        return self._file.write_if_dir_exists(offsets.items())

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets; a partition listed twice keeps its last line, as in Kafka."""
        return dict(self._file.read())


# -- leader-epoch checkpoint -------------------------------------------------------------------------


def _epoch_to_line(entry: EpochEntry) -> str:
    return f"{entry.epoch} {entry.start_offset}"


def _epoch_from_line(line: str) -> EpochEntry | None:
    parts = _java_split_ws(line)
    if len(parts) != 2:
        return None
    epoch, start = _java_int(parts[0], _INT32), _java_int(parts[1], _INT64)
    if epoch is None or start is None:
        return None
    return EpochEntry(epoch, start)


class LeaderEpochCheckpointFile:
    """``epoch startOffset`` lines, version 0: a partition's ``leader-epoch-checkpoint``."""

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            path, LEADER_EPOCH_CHECKPOINT_VERSION, _epoch_to_line, _epoch_from_line
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, entries: Iterable[EpochEntry], sync: bool = True) -> None:
        self._file.write(entries, sync)

    def write_if_dir_exists(self, entries: Iterable[EpochEntry]) -> bool:
        return self._file.write_if_dir_exists(entries)

    def read(self) -> list[EpochEntry]:
        return self._file.read()

    @staticmethod
    def encode(entries: Iterable[EpochEntry]) -> bytes:
        """The file's bytes for ``entries``: also the leader-epoch index uploaded with a remote segment."""
        return LeaderEpochCheckpointFile(Path("leader-epoch-checkpoint"))._file.encode(entries)

    @staticmethod
    def decode(data: bytes, location: str = "leader-epoch-checkpoint") -> list[EpochEntry]:
        return LeaderEpochCheckpointFile(Path(location))._file.decode(data)


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


class PartitionMetadataFile:
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

    def exists(self) -> bool:
        return self.path.is_file()

    def delete(self) -> bool:
        try:
            self.path.unlink()
            return True
        except FileNotFoundError:
            return False

    def read(self) -> bytes:
        """The topic id. FileNotFoundError if missing; CorruptCheckpointError if malformed, of another
        version, or the zero Uuid."""
        data = self.path.read_bytes()
        try:
            lines = _read_lines(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise CorruptCheckpointError(f"partition metadata file {self.path} is not valid UTF-8") from None
        fields = [_PM_SEPARATOR.split(line) for line in lines[:2]]
        if not fields or len(fields[0]) != 2 or fields[0][0] != "version":
            raise self._malformed(1, lines[0] if lines else "")
        version = _java_int(fields[0][1], _INT32)
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


# -- meta.properties -------------------------------------------------------------------------------------

def parse_java_properties(text: str, location: str = "properties") -> dict[str, str]:
    """:func:`tierlog._util.properties.read_properties`, a malformed escape as CorruptCheckpointError."""
    try:
        return read_properties(text, location)
    except PropertiesError as e:
        raise CorruptCheckpointError(f"{e.message} in {location}") from None


@dataclass(frozen=True)
class MetaProperties:
    """A log directory's identity. Version 1 (KRaft) requires ``cluster_id`` and ``node_id``;
    version 0 (ZooKeeper era) stores the node id as ``broker.id`` and may lack both."""

    version: int = 1
    cluster_id: str | None = None
    node_id: int | None = None
    directory_id: bytes | None = None

    def __post_init__(self) -> None:
        if self.version not in (0, 1):
            raise ValueError(f"unknown meta.properties version {self.version}")
        if self.version == 1 and (self.cluster_id is None or self.node_id is None):
            raise ValueError("meta.properties version 1 needs cluster.id and node.id")
        if self.directory_id is not None and len(self.directory_id) != 16:
            raise ValueError("directory.id must be a 16-byte Uuid")

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version)}
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        if self.node_id is not None:
            props["broker.id" if self.version == 0 else "node.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = uuid_to_base64(self.directory_id)
        return props

    @classmethod
    def from_properties(cls, props: Mapping[str, str], location: str = META_PROPERTIES) -> MetaProperties:
        def bad(message: str) -> CorruptCheckpointError:
            return CorruptCheckpointError(f"{location}: {message}")

        version_text = props.get("version", "0")
        if version_text not in ("0", "1"):
            raise bad(f"unknown meta.properties version {version_text!r}")
        version = int(version_text)
        node_key = "broker.id" if version == 0 else "node.id"
        node_id: int | None = None
        if node_key in props:
            node_id = _java_int(props[node_key], _INT32)
            if node_id is None:
                raise bad(f"unable to read {node_key} as a base-10 number: {props[node_key]!r}")
        elif version == 1:
            raise bad("failed to find node.id")
        cluster_id = props.get("cluster.id")
        if version == 1 and cluster_id is None:
            raise bad("cluster.id was not found")
        directory_id: bytes | None = None
        if "directory.id" in props:
            try:
                directory_id = uuid_from_base64(props["directory.id"])
            except ValueError as e:
                raise bad(f"unable to read directory.id as a Uuid: {e}") from None
        return cls(version, cluster_id, node_id, directory_id)

    @classmethod
    def read(cls, path: Path) -> MetaProperties:
        """FileNotFoundError if missing; CorruptCheckpointError if invalid."""
        # Properties.load(InputStream) decodes ISO-8859-1; the values Kafka writes are ASCII anyway.
        text = Path(path).read_bytes().decode("latin-1")
        return cls.from_properties(parse_java_properties(text, str(path)), str(path))

    def write(self, path: Path, now_ms: int | None = None, sync: bool = True) -> None:
        """``now_ms`` dates the file (the broker passes its clock's); None: the system clock's now."""
        stamp_ms = SYSTEM_CLOCK.wall_ms() if now_ms is None else now_ms
        write_atomic(Path(path), format_properties(self.to_properties(), stamp_ms).encode("utf-8"), sync=sync)


def well_formed_cluster_id(cluster_id: str | None) -> bool:
    """Cluster ids are Uuids in base64 (what tierlog and ``kafka-storage format`` write): anything
    else in a meta.properties is a damaged one."""
    return cluster_id is not None and is_uuid_text(cluster_id)


def salvage_meta_properties(path: Path) -> tuple[str | None, bytes | None]:
    """The cluster id and directory id still legible in a damaged ``meta.properties`` (each None if
    its line is damaged too): a broker keeps its cluster id rather than drawing a new one each start."""
    try:
        props = parse_java_properties(Path(path).read_bytes().decode("latin-1"), str(path))
    except (OSError, TierlogError):
        return None, None
    cluster_id = props.get("cluster.id")
    if not well_formed_cluster_id(cluster_id):
        cluster_id = None
    directory_id: bytes | None = None
    try:
        directory_id = uuid_from_base64(props.get("directory.id", ""))
    except ValueError:
        pass
    return cluster_id, directory_id


def read_meta_properties(path: Path) -> MetaProperties:
    return MetaProperties.read(path)


def write_meta_properties(path: Path, meta: MetaProperties, now_ms: int | None = None, sync: bool = True) -> None:
    meta.write(path, now_ms, sync)


# -- .kafka_cleanshutdown --------------------------------------------------------------------------------


class CleanShutdownFile:
    """The clean-shutdown marker of a log directory. Only its existence decides whether recovery
    runs; the content (``{"version":0,"brokerEpoch":N}``) is informational (KIP-966)."""

    def __init__(self, log_dir: Path) -> None:
        log_dir = Path(log_dir)
        # Accept the marker's own path too: both spellings occur at call sites.
        self.path = log_dir if log_dir.name == CLEAN_SHUTDOWN else log_dir / CLEAN_SHUTDOWN

    def write(self, broker_epoch: int = -1, sync: bool = True) -> None:
        content = json.dumps({"version": CLEAN_SHUTDOWN_VERSION, "brokerEpoch": broker_epoch}, separators=(",", ":"))
        write_atomic(self.path, content.encode("utf-8"), sync=sync)

    def exists(self) -> bool:
        return self.path.is_file()

    def delete(self) -> bool:
        try:
            self.path.unlink()
            return True
        except FileNotFoundError:
            return False

    def read(self) -> int | None:
        """The broker epoch recorded, or None if the file is missing or unreadable (as Kafka, which
        logs and returns -1). Unknown fields are ignored."""
        try:
            content = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return None
        epoch = content.get("brokerEpoch") if isinstance(content, dict) else None
        return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None
