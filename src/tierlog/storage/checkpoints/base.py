"""What every checkpoint-format module shares: the file names of a log directory, the format
versions, :class:`CorruptCheckpointError`, Java's line/whitespace/integer parsing rules, and Kafka's
generic ``CheckpointFile`` (see :mod:`tierlog.storage.checkpoints`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

from tierlog._util.files import write_atomic
from tierlog.errors import KafkaStorageError

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

INT32_BOUNDS = (-(2**31), 2**31 - 1)
INT64_BOUNDS = (-(2**63), 2**63 - 1)

T = TypeVar("T")


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint, metadata or properties file that cannot be read; the message names the file
    and, where there is one, the line. A storage error: Kafka takes the log dir offline for it."""


# -- Java parsing rules ------------------------------------------------------------------------------

# BufferedReader.readLine ends a line at \n, \r or \r\n, and nothing else (str.splitlines would
# also split on \v, \f, \x1c…, which Java keeps inside the line).
LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Java's \s: space, \t, \n, \x0B, \f, \r.
JAVA_WS = re.compile(r"[ \t\n\x0b\f\r]+")
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def read_lines(text: str) -> list[str]:
    if not text:
        return []
    lines = LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()  # the terminator of the last line does not start another
    return lines


def java_split_ws(line: str) -> list[str]:
    """``Pattern.compile("\\s+").split(line)``: a leading separator yields an empty first field and
    trailing empty fields are dropped."""
    parts = JAVA_WS.split(line)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def java_int(text: str, bounds: tuple[int, int]) -> int | None:
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
        lines = read_lines(text)
        if not lines:
            return []
        version = java_int(lines[0], INT32_BOUNDS)
        if version is None:
            raise self._malformed(1, lines[0])
        if version != self.version:
            raise CorruptCheckpointError(
                f"unrecognised version {version} (expected {self.version}) in checkpoint file {self.path}"
            )
        if len(lines) == 1:
            return []
        expected = java_int(lines[1], INT32_BOUNDS)
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


class SingleFile:
    """A file of one fixed path (``partition.metadata``, ``.kafka_cleanshutdown``): whether it is
    there, and deleting it."""

    path: Path

    def exists(self) -> bool:
        return self.path.is_file()

    def delete(self) -> bool:
        """True when there was a file to delete."""
        try:
            self.path.unlink()
            return True
        except FileNotFoundError:
            return False
