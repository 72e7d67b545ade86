"""The remote tier in S3 (or any S3-compatible store) through ``obstore``.

Properties (``rsm.config.`` prefix removed):

* ``s3.bucket`` (required), ``s3.region`` (default us-east-1), ``s3.endpoint`` (default AWS's),
  ``s3.prefix`` (default empty): where new segments go.
* ``s3.allow.http``: plain HTTP; defaults to true only for an ``http://`` endpoint on a loopback
  address (a local test server), never for anything else.
* ``s3.max.retries`` (default 3), ``s3.connect.timeout.ms`` (5000), ``s3.request.timeout.ms`` (30000).
* ``s3.multipart.threshold.bytes`` (64 MiB): larger files go up as multipart uploads of
  ``s3.multipart.chunk.bytes`` (16 MiB), ``s3.multipart.concurrency`` (8) parts at a time.

Credentials come from the environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``, or whatever obstore's AWS chain finds). Readers that get theirs another way
(the Spark pipeline, from Spark conf) pass ``s3.access.key.id``, ``s3.secret.access.key`` and
``s3.session.token``, which win over the environment; a broker's config should not hold them.

Objects of a segment share one key base,
``<prefix><topicId>-<partition>/<20-digit start offset>-<segment id>``, plus Kafka's file suffixes. The
topic *id* rather than its name keeps the key short: the key base goes into the segment's custom
metadata (KIP-917, limit 128 bytes by default) together with the total uploaded size, so fetch and
delete read the key back from the metadata and a later change of ``s3.prefix`` does not orphan the
segments written before it.

Each partition's manifest (tiered/manifest.py) is a set of immutable objects under
``<prefix><topicId>-<partition>/_manifest/``, each created once with a conditional PUT
(``If-None-Match: *``); readers list the prefix with a delimiter to find the partitions, then each
partition's ``_manifest/``.
"""

from __future__ import annotations

import io
import ipaddress
import logging
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlparse

from tierlog._util.extras import require_extra
from tierlog._util.varint import read_unsigned_varint, write_unsigned_varint
from tierlog.errors import InvalidRecordError
from tierlog.ids import TopicIdPartition, uuid_to_base64
from tierlog.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteConflictError,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tierlog.tiered.backends.local import (
    ALL_SUFFIXES,
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    segment_objects,
)
from tierlog.tiered.manifest_format import MANIFEST_DIR

if TYPE_CHECKING:
    from obstore.store import S3Store

log = logging.getLogger(__name__)

CUSTOM_METADATA_VERSION = 0
#: Credential properties and the obstore S3Config keys they set.
_CREDENTIAL_PROPS = {"s3.access.key.id": "access_key_id", "s3.secret.access.key": "secret_access_key",
                     "s3.session.token": "session_token"}


def encode_custom_metadata(total_size_bytes: int, key_base: str) -> bytes:
    """version (1 byte), uvarint total uploaded bytes, uvarint key length, UTF-8 key base."""
    out = bytearray((CUSTOM_METADATA_VERSION,))
    write_unsigned_varint(out, total_size_bytes)
    key = key_base.encode("utf-8")
    write_unsigned_varint(out, len(key))
    out += key
    return bytes(out)


def decode_custom_metadata(data: bytes) -> tuple[int, str]:
    """(total uploaded bytes, key base); RemoteStorageError if the bytes are not ours."""
    try:
        if not data or data[0] != CUSTOM_METADATA_VERSION:
            raise RemoteStorageError(f"unknown S3 custom metadata version {data[:1]!r}")
        size, pos = read_unsigned_varint(data, 1, 10)
        length, pos = read_unsigned_varint(data, pos)
        if pos + length != len(data):
            raise RemoteStorageError("S3 custom metadata has trailing or missing bytes")
        return size, data[pos:].decode("utf-8")
    except (InvalidRecordError, UnicodeDecodeError) as e:
        raise RemoteStorageError(f"malformed S3 custom metadata: {e}") from e


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _int(props: Mapping[str, str], key: str, default: int) -> int:
    raw = props.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise RemoteStorageError(f"{key} must be an integer, got {raw!r}") from None


class _StreamReader(io.RawIOBase):
    """A file-like view of a streamed GET, so a remote read pulls only the bytes it consumes."""

    def __init__(self, chunks: Iterator[Any]) -> None:
        self._chunks = chunks
        self._buf = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                self._buf = memoryview(bytes(next(self._chunks)))
            except StopIteration:
                return 0
            except Exception as e:
                raise RemoteStorageError(f"reading a remote segment stream: {e}") from e
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


class S3RemoteStorageManager:
    def __init__(self) -> None:
        self._store: S3Store | None = None
        self.bucket = ""
        self.prefix = ""
        self.multipart_threshold = 64 << 20
        self.multipart_chunk = 16 << 20
        self.multipart_concurrency = 8

    def configure(self, props: Mapping[str, str]) -> None:
        require_extra("s3", "the S3 remote storage", "obstore")
        from obstore.store import S3Store

        bucket = props.get("s3.bucket")
        if not bucket:
            raise RemoteStorageError("the S3 remote storage needs rsm.config.s3.bucket")
        prefix = props.get("s3.prefix", "").strip("/")
        endpoint = props.get("s3.endpoint")
        allow_http_raw = props.get("s3.allow.http")
        if allow_http_raw is not None:
            allow_http = allow_http_raw.strip().lower() == "true"
        elif endpoint:
            parsed = urlparse(endpoint)
            allow_http = parsed.scheme == "http" and _is_loopback(parsed.hostname or "")
        else:
            allow_http = False
        config: dict[str, Any] = {"region": props.get("s3.region", "us-east-1")}
        if endpoint:
            config["endpoint"] = endpoint
        # Credentials given as properties (a reader's, e.g. from Spark conf) win over the environment's.
        for prop, key in _CREDENTIAL_PROPS.items():
            if props.get(prop):
                config[key] = props[prop]
        client_options: dict[str, Any] = {
            "allow_http": allow_http,
            "connect_timeout": timedelta(milliseconds=_int(props, "s3.connect.timeout.ms", 5000)),
            "timeout": timedelta(milliseconds=_int(props, "s3.request.timeout.ms", 30000)),
        }
        retry: dict[str, Any] = {
            "max_retries": _int(props, "s3.max.retries", 3),
            "retry_timeout": timedelta(milliseconds=_int(props, "s3.retry.timeout.ms", 30000)),
        }
        self._store = S3Store(bucket, config=config, client_options=client_options,  # type: ignore[arg-type]
                              retry_config=retry)  # type: ignore[arg-type]
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        # One PUT below the threshold (one request, nothing left behind if it fails); multipart with
        # parallel parts above it, where it is faster and a single PUT would hit S3's 5 GiB limit.
        self.multipart_threshold = _int(props, "s3.multipart.threshold.bytes", 64 << 20)
        self.multipart_chunk = _int(props, "s3.multipart.chunk.bytes", 16 << 20)
        self.multipart_concurrency = _int(props, "s3.multipart.concurrency", 8)

    @property
    def store(self) -> S3Store:
        if self._store is None:
            raise RemoteStorageError("the remote storage manager is not configured")
        return self._store

    # -- keys -----------------------------------------------------------------------------------

    def new_key_base(self, metadata: RemoteLogSegmentMetadata) -> str:
        tip = metadata.topic_id_partition
        return (f"{self.prefix}{uuid_to_base64(tip.topic_id)}-{tip.partition}/"
                f"{metadata.start_offset:020d}-{metadata.segment_id.id_str}")

    def key_base(self, metadata: RemoteLogSegmentMetadata) -> str:
        """The key base recorded at upload time, else the one the current prefix gives."""
        if metadata.custom_metadata:
            return decode_custom_metadata(metadata.custom_metadata)[1]
        return self.new_key_base(metadata)

    # -- the partition manifest's objects (tiered/manifest.py) ---------------------------------

    def manifest_location(self, tip: TopicIdPartition) -> str:
        """Beside the partition's segments: ``<prefix><topicId>-<partition>/``."""
        return f"{self.prefix}{uuid_to_base64(tip.topic_id)}-{tip.partition}/"

    def manifest_locations(self) -> list[str]:
        """Every partition prefix under the prefix (one LIST with a delimiter); one whose manifest is
        missing (segments of an older broker, its last one just deleted) reads as having none."""
        import obstore

        try:
            listing = obstore.list_with_delimiter(self.store, prefix=self.prefix.rstrip("/") or None)
        except Exception as e:
            raise RemoteStorageError(f"listing s3://{self.bucket}/{self.prefix}: {e}") from e
        return sorted(f"{p.rstrip('/')}/" for p in listing["common_prefixes"])

    def list_manifest_objects(self, location: str) -> list[str]:
        """The names (``_manifest/<name>``) of the partition's versioned manifest objects: one LIST of
        ``<location>_manifest/``, which holds only them (not the partition's segments)."""
        import obstore

        prefix = location + MANIFEST_DIR
        try:
            keys = [str(meta["path"]) for chunk in obstore.list(self.store, prefix=prefix) for meta in chunk]
        except Exception as e:
            raise RemoteStorageError(f"listing s3://{self.bucket}/{prefix}/: {e}") from e
        return sorted(k[len(location):] for k in keys if k.startswith(prefix + "/"))

    def read_manifest_object(self, location: str, name: str) -> bytes | None:
        import obstore

        key = location + name
        try:
            return bytes(obstore.get(self.store, key).bytes())
        except FileNotFoundError:
            return None
        except Exception as e:
            raise RemoteStorageError(f"reading s3://{self.bucket}/{key}: {e}") from e

    def create_manifest_object(self, location: str, name: str, data: bytes) -> None:
        """One PUT with ``If-None-Match: *``: created whole, or RemoteConflictError when the key exists
        (another writer created it first)."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        key = location + name
        try:
            obstore.put(self.store, key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            raise RemoteConflictError(f"s3://{self.bucket}/{key} exists: another writer created it") from None
        except Exception as e:
            raise RemoteStorageError(f"writing s3://{self.bucket}/{key}: {e}") from e

    def delete_manifest_objects(self, location: str, names: list[str]) -> None:
        import obstore

        if not names:
            return
        try:
            obstore.delete(self.store, [location + name for name in names])
        except Exception as e:
            raise RemoteStorageError(f"deleting manifest objects under s3://{self.bucket}/{location}: {e}") from e

    # -- copy -----------------------------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        import obstore

        base = self.new_key_base(metadata)
        sources = segment_objects(segment_data)

        def put(item: tuple[str, Path | bytes]) -> int:
            suffix, source = item
            if isinstance(source, bytes):
                obstore.put(self.store, base + suffix, source)
                return len(source)
            size = source.stat().st_size
            obstore.put(self.store, base + suffix, source if size else b"", use_multipart=size > self.multipart_threshold,
                        chunk_size=self.multipart_chunk, max_concurrency=self.multipart_concurrency)
            return size

        try:
            # All objects of the segment at once: the small ones cost a round trip each, which
            # overlaps with the segment's upload instead of adding to it (obstore releases the GIL).
            with ThreadPoolExecutor(len(sources), thread_name_prefix="s3-upload") as pool:
                total = sum(pool.map(put, sources))
        except Exception as e:
            # Each attempt has its own segment id: whatever this one wrote is removed now or never.
            self._delete_keys(base, best_effort=True)
            if isinstance(e, RemoteStorageError):
                raise
            raise RemoteStorageError(f"uploading {metadata.segment_id} to s3://{self.bucket}/{base}: {e}") from e
        return encode_custom_metadata(total, base)

    # -- fetch ----------------------------------------------------------------------------------

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        import obstore

        if start_position < 0:
            raise ValueError(f"start position {start_position} is negative")
        if end_position is not None and end_position < start_position:
            raise ValueError(f"end position {end_position} is below the start position {start_position}")
        key = self.key_base(metadata) + LOG_SUFFIX
        try:
            if start_position >= metadata.segment_size_in_bytes:
                # S3 refuses a range starting at or past the end (416): nothing to read, but a missing
                # object must still say so.
                obstore.head(self.store, key)
                return io.BytesIO(b"")
            if end_position is None:
                result = obstore.get(self.store, key, options={"range": {"offset": start_position}})
                return io.BufferedReader(_StreamReader(iter(result.stream(min_chunk_size=256 * 1024))), 256 * 1024)
            end = end_position + 1
            if metadata.segment_size_in_bytes > 0:
                end = min(end, metadata.segment_size_in_bytes)
            if end <= start_position:
                return io.BytesIO(b"")
            return io.BytesIO(bytes(obstore.get_range(self.store, key, start=start_position, end=end)))
        except FileNotFoundError as e:
            raise RemoteResourceNotFoundError(f"s3://{self.bucket}/{key} does not exist") from e
        except Exception as e:
            raise RemoteStorageError(f"fetching s3://{self.bucket}/{key}: {e}") from e

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        import obstore

        key = self.key_base(metadata) + INDEX_SUFFIXES[index_type]
        try:
            return io.BytesIO(bytes(obstore.get(self.store, key).bytes()))
        except FileNotFoundError as e:
            raise RemoteResourceNotFoundError(f"s3://{self.bucket}/{key} does not exist") from e
        except Exception as e:
            raise RemoteStorageError(f"fetching s3://{self.bucket}/{key}: {e}") from e

    # -- delete ---------------------------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._delete_keys(self.key_base(metadata), best_effort=False)

    def _delete_keys(self, base: str, *, best_effort: bool) -> None:
        import obstore

        try:
            # S3 deletes of missing keys succeed, which makes this idempotent.
            obstore.delete(self.store, [base + suffix for suffix in ALL_SUFFIXES])
        except Exception as e:
            if best_effort:
                log.warning("could not remove the objects under s3://%s/%s: %s", self.bucket, base, e)
                return
            raise RemoteStorageError(f"deleting s3://{self.bucket}/{base}*: {e}") from e

    def close(self) -> None:
        self._store = None

    @staticmethod
    def uploaded_size_bytes(custom_metadata: bytes) -> int | None:
        """Total bytes uploaded for a segment, from its custom metadata (for ``tier status``)."""
        return decode_custom_metadata(custom_metadata)[0]

    def list_keys(self) -> list[str]:
        """Every key in the bucket under the configured prefix (tests look for orphans with it)."""
        import obstore

        out: list[str] = []
        for chunk in obstore.list(self.store, prefix=self.prefix or None):
            out.extend(str(meta["path"]) for meta in chunk)
        return sorted(out)
