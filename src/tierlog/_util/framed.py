"""tierlog's own small state files: a 4-byte magic, a version, a CRC-32C of the payload, the payload.

Every file tierlog defines (rather than Kafka) is framed so: a torn or flipped byte is detected and
reported as damage instead of being believed, and a newer version is refused by name rather than
misread. Written atomically (temp file, fsync, rename, fsync of the directory)."""

from __future__ import annotations

import struct
from pathlib import Path

from tierlog._util.crc import crc32c
from tierlog._util.files import write_atomic

_HEADER = struct.Struct(">4sHI")


class FramedFileError(ValueError):
    """The file is not a readable framed file of the expected kind and version."""


def encode_framed(magic: bytes, version: int, payload: bytes) -> bytes:
    if len(magic) != 4:
        raise ValueError(f"a magic is 4 bytes, not {len(magic)}")
    return _HEADER.pack(magic, version, crc32c(payload)) + payload


def decode_framed(data: bytes, magic: bytes, versions: frozenset[int] | set[int], source: str) -> tuple[int, bytes]:
    """(version, payload) of ``data``; FramedFileError naming ``source`` when it is not one."""
    if len(data) < _HEADER.size:
        raise FramedFileError(f"{source}: {len(data)} bytes, shorter than its {_HEADER.size}-byte header")
    found, version, crc = _HEADER.unpack_from(data)
    if found != magic:
        raise FramedFileError(f"{source}: magic {found!r}, expected {magic!r}")
    if version not in versions:
        raise FramedFileError(f"{source}: version {version} is not one of {sorted(versions)}")
    payload = data[_HEADER.size:]
    if crc32c(payload) != crc:
        raise FramedFileError(f"{source}: CRC-32C mismatch (damaged)")
    return version, payload


def write_framed(path: Path, magic: bytes, version: int, payload: bytes, *, sync: bool = True) -> None:
    write_atomic(path, encode_framed(magic, version, payload), sync=sync)


def read_framed(path: Path, magic: bytes, versions: frozenset[int] | set[int]) -> tuple[int, bytes] | None:
    """(version, payload), None when the file does not exist, FramedFileError when it is damaged."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode_framed(data, magic, versions, str(path))
