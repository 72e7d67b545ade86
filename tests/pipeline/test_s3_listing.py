"""Planning from the manifests in S3 when the store misbehaves (issue 26): a LIST that is throttled
or fails, one manifest's GET that fails, a store that is down. Each is an error naming the store and
the prefix (or the object), never a plan without the partitions it could not read. S3 is moto's
server on loopback behind a small proxy that answers chosen requests with S3's 503 SlowDown."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.helpers.tiered import MOTO_SKIP, MotoServer, s3_props
from tierlog.errors import TierlogError
from tierlog.ids import random_uuid
from tierlog.pipeline.options import parse_options
from tierlog.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.manifest import ManifestPublisher
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager

S3_CLASS = "tierlog.tiered.backends.s3.S3RemoteStorageManager"
BUCKET = "listing"
SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")


class FaultProxy:
    """Forwards every request to ``upstream``, except those ``fail(method, path)`` picks, which get a
    503 SlowDown as S3 throttles."""

    def __init__(self, upstream_port: int) -> None:
        self.fail: Callable[[str, str], bool] = lambda method, path: False
        self.failed: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                if proxy.fail(self.command, self.path):
                    proxy.failed.append(f"{self.command} {self.path}")
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOW_DOWN)))
                    self.end_headers()
                    self.wfile.write(SLOW_DOWN)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _forward

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def store() -> Iterator[tuple[MotoServer, FaultProxy]]:
    try:
        import moto.server  # noqa: F401
    except ImportError:
        pytest.skip(MOTO_SKIP)
    server = MotoServer()
    server.create_bucket(BUCKET)
    proxy = FaultProxy(server.port)
    yield server, proxy
    proxy.close()
    server.stop()


@pytest.fixture(scope="module")
def published(store: tuple[MotoServer, FaultProxy], tmp_path_factory: pytest.TempPathFactory) -> None:
    """Two partitions' manifests in the bucket, written by the broker's publisher."""
    from tierlog.tiered.backends.s3 import S3RemoteStorageManager

    server, _ = store
    rsm = S3RemoteStorageManager()
    rsm.configure({**s3_props(server, BUCKET), "s3.access.key.id": "testing", "s3.secret.access.key": "testing"})
    rlmm = ManifestPublisher(FileRemoteLogMetadataManager(tmp_path_factory.mktemp("journal"), sync=False), rsm,
                             broker_id=1)
    for partition in range(2):
        tip = TopicIdPartition(b"\x04" * 16, "orders", partition)
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, random_uuid()), 0, 99, 1, 1, 1, 100)
        rlmm.add_remote_log_segment_metadata(md)
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1))
    rlmm.close()


def _plan(endpoint: str) -> list[tuple[str, int]]:
    opts = parse_options({"tail": "none", "subscribe": "orders", "remote.log.storage.manager.class.name": S3_CLASS,
                          "rsm.config.s3.bucket": BUCKET, "rsm.config.s3.prefix": "tiered",
                          "rsm.config.s3.endpoint": endpoint, "rsm.config.s3.region": "us-east-1",
                          "rsm.config.s3.max.retries": "1", "rsm.config.s3.access.key.id": "testing",
                          "rsm.config.s3.secret.access.key": "testing"})
    return sorted((p.topic, p.partition) for p in opts.partitions(opts.discover()))


def test_planning_from_s3_reads_every_partitions_manifest(store: tuple[MotoServer, FaultProxy],
                                                          published: None) -> None:
    _, proxy = store
    proxy.fail = lambda method, path: False
    assert _plan(proxy.endpoint) == [("orders", 0), ("orders", 1)]


def test_a_throttled_listing_is_an_error_naming_the_bucket_and_prefix(store: tuple[MotoServer, FaultProxy],
                                                                       published: None) -> None:
    _, proxy = store
    proxy.failed.clear()
    proxy.fail = lambda method, path: method == "GET" and "list-type=2" in path
    with pytest.raises(TierlogError) as raised:
        _plan(proxy.endpoint)
    message = str(raised.value)
    assert "listing s3://listing/tiered" in message and "remote tier's manifests (S3RemoteStorageManager)" in message
    assert "\n" not in message and "503" in message  # one line, with the store's status
    assert len(proxy.failed) == 2  # the request and its one retry (s3.max.retries=1), then the error


def test_one_manifest_that_cannot_be_read_fails_the_plan_instead_of_dropping_its_partition(
        store: tuple[MotoServer, FaultProxy], published: None) -> None:
    _, proxy = store
    proxy.failed.clear()
    proxy.fail = lambda method, path: method == "GET" and "-1/_manifest/0" in path  # its objects, not its listing
    with pytest.raises(TierlogError, match=r"reading s3://listing/tiered/[\w-]+-1/_manifest/\d{20}\.checkpoint\.json"):
        _plan(proxy.endpoint)
    assert proxy.failed


def test_a_store_that_is_down_is_an_error_naming_it(store: tuple[MotoServer, FaultProxy], published: None) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TierlogError, match="listing s3://listing/tiered"):
        _plan(f"http://127.0.0.1:{port}")
