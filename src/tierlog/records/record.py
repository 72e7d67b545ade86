"""One record inside a v2 batch (KAFKA-FACTS §1.3): the value type, its encoder, and two decoders —
a full one that builds :class:`Record` and a skipping one that only checks structure, for the
per-produce validation where allocating keys and values would be wasted work.

The varint readers are local rather than the ones in ``tierlog._util.varint`` because they run once
per field of every record; they also truncate exactly as Java's ``ByteUtils.readVarint`` does (a
5-byte varint keeps only the low 32 bits), so a batch Kafka accepts decodes to the same numbers here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tierlog._util.varint import read_varint, read_varlong, write_varint
from tierlog.errors import InvalidRecordError

Header = tuple[str, bytes | None]

#: length (5) + attributes (1) + timestampDelta (10) + offsetDelta (5): DefaultRecord.MAX_RECORD_OVERHEAD.
MAX_RECORD_OVERHEAD = 21


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


# ---------------------------------------------------------------------------------------------- encode


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> None:
    """Append one length-prefixed record to ``out`` (DefaultRecord.writeTo); attributes are always 0."""
    body = bytearray(b"\x00")
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    if key is None:
        body.append(0x01)  # zig-zag -1
    else:
        write_varint(body, len(key))
        body += key
    if value is None:
        body.append(0x01)
    else:
        write_varint(body, len(value))
        body += value
    write_varint(body, len(headers))
    for header_key, header_value in headers:
        if header_key is None:
            raise InvalidRecordError("a record header key must not be null")
        try:
            raw_key = header_key.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidRecordError(f"record header key {header_key!r} is not valid UTF-8: {e}") from None
        write_varint(body, len(raw_key))
        body += raw_key
        if header_value is None:
            body.append(0x01)
        else:
            write_varint(body, len(header_value))
            body += header_value
    write_varint(out, len(body))
    out += body


# ---------------------------------------------------------------------------------------------- decode


def _record_size_error(length: int, remaining: int) -> InvalidRecordError:
    return InvalidRecordError(
        f"Invalid record size: expected {length} bytes in record payload, "
        f"but instead the buffer has only {remaining} remaining bytes"
    )


def _read_headers(buf: bytes, pos: int, end: int, count: int) -> tuple[tuple[Header, ...], int]:
    headers: list[Header] = []
    for _ in range(count):
        key_length, pos = read_varint(buf, pos)
        if key_length < 0:
            raise InvalidRecordError(f"Invalid negative header key size {key_length}")
        if key_length > end - pos:
            raise InvalidRecordError(f"header key length {key_length} runs past the end of the record")
        # Java decodes with replacement characters rather than failing; do the same.
        key = buf[pos : pos + key_length].decode("utf-8", "replace")
        pos += key_length
        value_length, pos = read_varint(buf, pos)
        value: bytes | None = None
        if value_length >= 0:
            if value_length > end - pos:
                raise InvalidRecordError(f"header value length {value_length} runs past the end of the record")
            value = buf[pos : pos + value_length]
            pos += value_length
        headers.append((key, value))
    return tuple(headers), pos


def decode_record(
    buf: bytes,
    pos: int,
    end: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None = None,
) -> tuple[Record, int]:
    """Decode the record at ``pos`` (which must end by ``end``); return it and the position after it.

    Performs DefaultRecord.readFrom's checks; every failure is an InvalidRecordError.
    """
    try:
        length, pos = read_varint(buf, pos)
        if length < 0 or length > end - pos:
            raise _record_size_error(length, end - pos)
        start = pos
        record_end = pos + length
        pos += 1  # attributes: unused in v2
        timestamp_delta, pos = read_varlong(buf, pos)
        offset_delta, pos = read_varint(buf, pos)
        key_length, pos = read_varint(buf, pos)
        key: bytes | None = None
        if key_length >= 0:  # Java treats any negative length as null
            if key_length > record_end - pos:
                raise InvalidRecordError(f"key length {key_length} runs past the end of the record")
            key = buf[pos : pos + key_length]
            pos += key_length
        value_length, pos = read_varint(buf, pos)
        value: bytes | None = None
        if value_length >= 0:
            if value_length > record_end - pos:
                raise InvalidRecordError(f"value length {value_length} runs past the end of the record")
            value = buf[pos : pos + value_length]
            pos += value_length
        header_count, pos = read_varint(buf, pos)
        if header_count < 0:
            raise InvalidRecordError(f"Found invalid number of record headers {header_count}")
        headers: tuple[Header, ...] = ()
        if header_count:
            if header_count > record_end - pos:
                raise InvalidRecordError(
                    f"Found invalid number of record headers. {header_count} is larger than "
                    f"the remaining size of the record"
                )
            headers, pos = _read_headers(buf, pos, record_end, header_count)
        if pos != record_end:
            raise InvalidRecordError(
                f"Invalid record size: expected to read {length} bytes in record payload, "
                f"but instead read {pos - start}"
            )
    except IndexError:
        raise InvalidRecordError("Found invalid record structure: the record runs past the end of the batch") from None
    timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
    return Record(base_offset + offset_delta, timestamp, key, value, headers), pos


def skip_record(buf: bytes, pos: int, end: int) -> tuple[int, int, bool, int]:
    """Check the structure of the record at ``pos`` without copying its key, value or headers.

    Returns (timestampDelta, offsetDelta, has_key, position after the record). The checks are those
    of :func:`decode_record` (Kafka's skipKeyValueIterator still validates the record's size).
    This runs for every record of every produce request, so one-byte varints (nearly all of them
    in practice) are decoded inline rather than through a call.
    """
    try:
        b = buf[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            length, pos = read_varint(buf, pos)
        if length < 0 or length > end - pos:
            raise _record_size_error(length, end - pos)
        start = pos
        record_end = pos + length
        b = buf[pos + 1]  # after the unused attributes byte
        if b < 0x80:
            timestamp_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
        else:
            timestamp_delta, pos = read_varlong(buf, pos + 1)
        b = buf[pos]
        if b < 0x80:
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            offset_delta, pos = read_varint(buf, pos)
        b = buf[pos]
        if b < 0x80:
            key_length, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            key_length, pos = read_varint(buf, pos)
        if key_length > 0:
            if key_length > record_end - pos:
                raise InvalidRecordError(f"key length {key_length} runs past the end of the record")
            pos += key_length
        b = buf[pos]
        if b < 0x80:
            value_length, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            value_length, pos = read_varint(buf, pos)
        if value_length > 0:
            if value_length > record_end - pos:
                raise InvalidRecordError(f"value length {value_length} runs past the end of the record")
            pos += value_length
        b = buf[pos]
        if b < 0x80:
            header_count, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            header_count, pos = read_varint(buf, pos)
        if header_count:
            if header_count < 0:
                raise InvalidRecordError(f"Found invalid number of record headers {header_count}")
            if header_count > record_end - pos:
                raise InvalidRecordError(
                    f"Found invalid number of record headers. {header_count} is larger than "
                    f"the remaining size of the record"
                )
            for _ in range(header_count):
                b = buf[pos]
                if b < 0x80:
                    header_key_length, pos = (b >> 1) ^ -(b & 1), pos + 1
                else:
                    header_key_length, pos = read_varint(buf, pos)
                if header_key_length < 0:
                    raise InvalidRecordError(f"Invalid negative header key size {header_key_length}")
                pos += header_key_length
                b = buf[pos]
                if b < 0x80:
                    header_value_length, pos = (b >> 1) ^ -(b & 1), pos + 1
                else:
                    header_value_length, pos = read_varint(buf, pos)
                if header_value_length > 0:
                    pos += header_value_length
                if pos > record_end:
                    raise InvalidRecordError("record header runs past the end of the record")
        if pos != record_end:
            raise InvalidRecordError(
                f"Invalid record size: expected to read {length} bytes in record payload, "
                f"but instead read {pos - start}"
            )
    except IndexError:
        raise InvalidRecordError("Found invalid record structure: the record runs past the end of the batch") from None
    return timestamp_delta, offset_delta, key_length >= 0, pos
