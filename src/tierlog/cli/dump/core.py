"""Options, report and file-type registry of ``tierlog dump-log``, and the helpers its dumpers share
(see :mod:`tierlog.cli.dump`)."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tierlog.errors import CorruptRecordError
from tierlog.records.header import (
    BatchHeader,
    Buffer,
    iter_headers,
)
from tierlog.storage import files

#: Marker suffixes Kafka appends to a file on its way out or in (KAFKA-FACTS §2.1). A marked file
#: has the same format as the unmarked one, so it is dumped by the unmarked suffix.
MARKER_SUFFIXES = (files.DELETED_SUFFIX, files.CLEANED_SUFFIX, files.SWAP_SUFFIX)

# Zero-filled tails are scanned in slices this big so a 1 GiB preallocated segment is never copied whole.
_SCAN_CHUNK = 1 << 20


@dataclass(frozen=True)
class DumpOptions:
    #: Print every record's metadata, not only the batches.
    deep_iteration: bool = False
    #: Print keys and payloads; implies ``deep_iteration`` (as in Kafka).
    print_data: bool = False
    #: Index files: check the entries against the log without printing them.
    verify_index_only: bool = False
    #: Index files: run only the sanity check (Kafka's ``--index-sanity-check``).
    index_sanity_only: bool = False
    #: Read at most this many bytes of each ``.log`` (None: the whole file).
    max_bytes: int | None = None

    @property
    def records(self) -> bool:
        return self.deep_iteration or self.print_data


class DumpReport:
    """Where a dump writes, and a count of what went wrong (see the module docstring for the two kinds).

    Dump lines and findings go to ``out`` in file order, so a finding appears next to the data it is
    about; problems go to ``err``, because they are about the invocation rather than the data.
    """

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out = out
        self._err = err
        self.findings = 0
        self.problems = 0

    def line(self, text: str) -> None:
        self._out.write(text + "\n")

    def finding(self, text: str) -> None:
        """A line about invalid data in a file that could be read."""
        self.findings += 1
        self.line(text)

    def count_finding(self) -> None:
        """Count a finding already visible in a dump line (``isvalid: false``)."""
        self.findings += 1

    def problem(self, text: str) -> None:
        """A file that could not be dumped at all."""
        self.problems += 1
        self._err.write(text + "\n")


#: Dumps one file of a given type; reports everything through the DumpReport.
Dumper = Callable[[Path, DumpOptions, DumpReport], None]

_DUMPERS: dict[str, Dumper] = {}


def register_dumper(suffix: str, dumper: Dumper) -> None:
    """Dump files ending in ``suffix`` (e.g. ``".checkpoint"``) with ``dumper``; replaces an earlier one.

    This is the hook for formats defined above the storage layer. A dumper for files made of
    record batches can call :func:`dump_record_batches` with its own preamble and record renderer.
    """
    if not suffix.startswith(".") or suffix.count(".") != 1:
        raise ValueError(f"a dumper suffix is one '.'-prefixed extension such as '.log', not {suffix!r}")
    _DUMPERS[suffix] = dumper


def registered_suffixes() -> tuple[str, ...]:
    return tuple(sorted(_DUMPERS))


def file_type_suffix(path: Path) -> str:
    """The suffix that decides how ``path`` is dumped: its extension once a marker is removed
    (``0042.log.deleted`` → ``.log``)."""
    name = path.name
    for marker in MARKER_SUFFIXES:
        if name.endswith(marker) and len(name) > len(marker):
            name = name[: -len(marker)]
            break
    return Path(name).suffix


def dump_file(path: Path, options: DumpOptions, report: DumpReport) -> None:
    """Dump one file by its type; every outcome is recorded in ``report`` (nothing is raised for a
    bad file, so a command dumping many files goes on to the next one)."""
    suffix = file_type_suffix(path)
    dumper = _DUMPERS.get(suffix)
    if not path.exists():
        report.problem(f"{path}: no such file")
        return
    if path.is_dir():
        report.problem(f"{path}: is a directory; give the files in it")
        return
    if dumper is None:
        known = ", ".join(registered_suffixes())
        kind = f"'{suffix}'" if suffix else "(no extension)"
        report.problem(f"{path}: unknown file type {kind}; dump-log reads {known} files")
        return
    report.line(f"Dumping {path}")
    try:
        dumper(path, options, report)
    except OSError as e:
        report.problem(f"{path}: cannot read: {e.strerror or e}")


# ---------------------------------------------------------------------------------------------- helpers


@contextmanager
def mapped(path: Path) -> Iterator[Buffer]:
    """The file's bytes, memory-mapped read-only, so a 1 GiB segment is walked without being read
    into memory; an empty file (which mmap refuses) is ``b""``.

    The map's length is fixed when it is made, so a broker appending meanwhile is harmless; a broker
    truncating the same file meanwhile (log truncation) would make reads past the new end fail with
    SIGBUS, which is why this tool is meant for inactive segments or a stopped broker, like Kafka's.
    """
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield mm
        finally:
            try:
                mm.close()
            except BufferError:
                # A view still referenced from a traceback being handled: the read-only map is
                # released when that view is collected; failing the dump over it would hide the
                # real error.
                pass


def walk_headers(buf: Buffer) -> Iterator[BatchHeader]:
    """The batches of a companion log up to its first invalid byte (index verification only needs
    the batches the broker itself would see)."""
    try:
        yield from iter_headers(buf)
    except CorruptRecordError:
        return


def base_offset(path: Path) -> int | None:
    try:
        return files.offset_from_file_name(path.name)
    except ValueError:
        return None


def companion(path: Path, suffix: str) -> Path:
    """The file of the same segment with another extension, keeping a marker suffix if there is one
    (``0042.index.deleted`` → ``0042.log.deleted``)."""
    name = path.name
    marker = next((m for m in MARKER_SUFFIXES if name.endswith(m) and len(name) > len(m)), "")
    stem = name[: len(name) - len(marker)] if marker else name
    return path.with_name(Path(stem).stem + suffix + marker)


def all_zero(buf: Buffer, start: int, end: int) -> bool:
    for i in range(start, end, _SCAN_CHUNK):
        chunk = bytes(buf[i : min(end, i + _SCAN_CHUNK)])
        if chunk.count(0) != len(chunk):
            return False
    return True


# Control characters (and Unicode line breaks) are escaped so a payload can never split its record
# over several lines; the rendering is for reading, not for recovering the exact bytes.
_ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}
_ESCAPES.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r", 0x85: "\\x85", 0x2028: "\\u2028", 0x2029: "\\u2029"})


def render_text(data: bytes) -> str:
    """Bytes as UTF-8 (invalid sequences become U+FFFD, as Java's String decoding does), on one line."""
    return data.decode("utf-8", "replace").translate(_ESCAPES)


def one_line(text: str) -> str:
    return text.translate(_ESCAPES)


def all_match(n: int, log_name: str) -> str:
    return f"The only entry matches {log_name}" if n == 1 else f"All {n} entries match {log_name}"


def optional_text(value: int) -> str:
    """Kafka prints these fields as OptionalLong; -1 is "absent" on disk."""
    return "none" if value < 0 else str(value)
