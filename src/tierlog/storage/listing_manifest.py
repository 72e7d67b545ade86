"""The clean-shutdown listing manifest: each partition's segment and snapshot offsets, so a clean
start need not list and parse thousands of file names per partition (seed 003).

tierlog's own file (Kafka has no such thing), so it carries a version and a CRC-32C and is written
atomically. It is trusted only after a clean shutdown and only for a partition directory whose
mtime is unchanged since it was written: creating, deleting or renaming any file in a directory
changes its mtime, so an edited directory is simply listed as usual.

Layout (big-endian): magic ``TLLM``, u16 version (1), u32 crc32c of everything after it, u32
partition count, then per partition: u16 name length, name (UTF-8), i64 dir mtime_ns, u32 segment
count, i64 × count segment base offsets, u32 snapshot count, i64 × count snapshot offsets.
"""

from __future__ import annotations

import logging
import os
import struct
import sys
from array import array
from dataclasses import dataclass
from pathlib import Path

from tierlog._util.framed import FramedFileError, read_framed, write_framed

log = logging.getLogger(__name__)

MANIFEST_FILE = "tierlog-listing-manifest"
MAGIC = b"TLLM"
VERSION = 1
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


@dataclass(frozen=True)
class PartitionListing:
    base_offsets: list[int]
    snapshot_offsets: list[int]


def _int64s(values: list[int]) -> bytes:
    arr = array("q", values)
    if sys.byteorder == "little":
        arr.byteswap()
    return arr.tobytes()


def _from_int64s(data: bytes | memoryview) -> list[int]:
    arr = array("q")
    arr.frombytes(data)
    if sys.byteorder == "little":
        arr.byteswap()
    return arr.tolist()


def listing_of(directory: Path) -> tuple[PartitionListing, int] | None:
    """The offsets in a partition directory and its mtime, or None if it holds anything but plain
    segment, index and snapshot files (leftovers must go through the full load)."""
    bases: list[int] = []
    snapshots: list[int] = []
    for name in os.listdir(directory):
        stem, _, suffix = name.partition(".")
        if suffix == "log" and stem.isdigit():
            bases.append(int(stem))
        elif suffix == "snapshot" and stem.isdigit():
            snapshots.append(int(stem))
        elif (suffix in ("index", "timeindex", "txnindex") and stem.isdigit()) or name in ("leader-epoch-checkpoint", "partition.metadata"):
            continue
        else:
            return None
    mtime_ns = os.stat(directory).st_mtime_ns
    return PartitionListing(sorted(bases), sorted(snapshots)), mtime_ns


def write_manifest(log_dir: Path, partition_dirs: list[Path]) -> int:
    """Record the listing of every clean partition dir; returns how many were recorded."""
    body = bytearray()
    count = 0
    for d in partition_dirs:
        found = listing_of(d)
        if found is None:
            continue
        listing, mtime_ns = found
        name = d.name.encode()
        body += _U16.pack(len(name)) + name + _I64.pack(mtime_ns)
        body += _U32.pack(len(listing.base_offsets)) + _int64s(listing.base_offsets)
        body += _U32.pack(len(listing.snapshot_offsets)) + _int64s(listing.snapshot_offsets)
        count += 1
    payload = _U32.pack(count) + bytes(body)
    write_framed(log_dir / MANIFEST_FILE, MAGIC, VERSION, payload)
    return count


def read_manifest(log_dir: Path) -> dict[str, tuple[int, PartitionListing]]:
    """Partition dir name → (mtime_ns, listing). A missing, damaged or unknown-version manifest reads
    as empty, which only means every partition is listed as usual."""
    path = log_dir / MANIFEST_FILE
    try:
        found = read_framed(path, MAGIC, {VERSION})
    except FramedFileError as e:
        log.warning("ignoring %s: %s", path, e)
        return {}
    if found is None:
        return {}
    payload = memoryview(found[1])
    out: dict[str, tuple[int, PartitionListing]] = {}
    try:
        (count,) = _U32.unpack_from(payload, 0)
        pos = 4
        for _ in range(count):
            (n,) = _U16.unpack_from(payload, pos)
            name = bytes(payload[pos + 2 : pos + 2 + n]).decode()
            pos += 2 + n
            (mtime_ns,) = _I64.unpack_from(payload, pos)
            pos += 8
            (nb,) = _U32.unpack_from(payload, pos)
            bases = _from_int64s(payload[pos + 4 : pos + 4 + 8 * nb])
            pos += 4 + 8 * nb
            (ns,) = _U32.unpack_from(payload, pos)
            snaps = _from_int64s(payload[pos + 4 : pos + 4 + 8 * ns])
            pos += 4 + 8 * ns
            out[name] = (mtime_ns, PartitionListing(bases, snaps))
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        log.warning("ignoring %s: %s", path, e)
        return {}
    return out


def delete_manifest(log_dir: Path) -> None:
    (log_dir / MANIFEST_FILE).unlink(missing_ok=True)


def trusted_listing(directory: Path, manifest: dict[str, tuple[int, PartitionListing]]) -> PartitionListing | None:
    entry = manifest.get(directory.name)
    if entry is None:
        return None
    mtime_ns, listing = entry
    try:
        if os.stat(directory).st_mtime_ns != mtime_ns:
            return None
    except FileNotFoundError:
        return None
    return listing


__all__ = ["MANIFEST_FILE", "PartitionListing", "read_manifest", "trusted_listing", "write_manifest"]
