"""An S3 server (moto's, in server mode) in a process of its own that survives SIGKILL.

moto keeps its buckets in the memory of the server process, so a plain kill and restart would lose
every object the server had acknowledged -- nothing a real store does, and it would make the remote
tier look lossy for reasons of the test's own making. This server keeps a journal instead: every
request that changes state (PUT, POST, DELETE) is appended to ``journal`` *before* moto processes it,
and a restarted server replays the journal into a fresh moto, in-process and before it binds its
port, so no client sees the state half restored.

What that models: a store whose acknowledged writes are durable, and where a write the server
received but never answered (the kill came first) may or may not have happened -- here it always
happens on replay, which is the harder case for the client (an upload it thinks failed is there).
A record torn by the kill (the server died writing it) is cut off before the restarted server
appends: that request was never processed either.

Run as ``python -m tests.helpers.s3_server --port N --journal FILE`` (cwd = the repository);
:class:`JournaledS3Server` does that and can SIGKILL and restart it.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from tests.helpers.ports import free_port
from tests.helpers.waits import wait_until

READY = "s3 server ready on "
REPO_ROOT = Path(__file__).resolve().parents[2]
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
_MUTATING = ("PUT", "POST", "DELETE")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


# -- inside the server process -------------------------------------------------------------------------


def _read_body(environ: dict[str, Any]) -> bytes:
    length = environ.get("CONTENT_LENGTH")
    stream = environ["wsgi.input"]
    if length:
        return bytes(stream.read(int(length)))
    if environ.get("wsgi.input_terminated") or "chunked" in environ.get("HTTP_TRANSFER_ENCODING", ""):
        return bytes(stream.read())
    return b""


def journaled(app: WsgiApp, journal: Path) -> WsgiApp:
    """The WSGI app with every mutating request appended to ``journal`` before it runs (one write of
    one line per request, under a lock, so concurrent requests never interleave their records)."""
    lock = threading.Lock()
    fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] in _MUTATING:
            body = _read_body(environ)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
            environ.pop("HTTP_TRANSFER_ENCODING", None)
            headers = {k[5:].replace("_", "-").title(): v for k, v in environ.items() if k.startswith("HTTP_")}
            if environ.get("CONTENT_TYPE"):
                headers["Content-Type"] = environ["CONTENT_TYPE"]
            record = {"method": environ["REQUEST_METHOD"], "path": environ.get("PATH_INFO", "/"),
                      "query": environ.get("QUERY_STRING", ""), "headers": headers,
                      "body": base64.b64encode(body).decode("ascii")}
            line = (json.dumps(record) + "\n").encode()
            with lock:
                os.write(fd, line)
        return app(environ, start_response)

    return wrapped


def _records(journal: Path) -> list[dict[str, Any]]:
    out = []
    for raw in journal.read_bytes().splitlines():
        try:
            out.append(json.loads(raw))
        except ValueError:
            continue  # the record the kill tore: its request was never processed
    return out


def _deleted_keys(body: bytes) -> list[str]:
    """The keys of a DeleteObjects request body."""
    root = ElementTree.fromstring(body)
    return [el.text or "" for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "Key"]


def compact(records: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The records that rebuild the same state: bucket requests, then the last PUT of every object
    still there. None when the journal holds requests this does not model (multipart uploads,
    anything but PUT/DELETE of objects and buckets and DeleteObjects): replay it all then."""
    buckets: list[dict[str, Any]] = []
    live: dict[str, dict[str, Any]] = {}
    for record in records:
        path, method, query = record["path"], record["method"], record["query"]
        bucket_level = path.strip("/").count("/") == 0
        if bucket_level and method == "PUT" and not query:
            buckets.append(record)
        elif bucket_level and method == "POST" and query in ("delete", "delete="):
            for key in _deleted_keys(base64.b64decode(record["body"])):
                live.pop(f"{path.rstrip('/')}/{key}", None)
        elif not bucket_level and not query and method == "PUT":
            live.pop(path, None)
            live[path] = record
        elif not bucket_level and not query and method == "DELETE":
            live.pop(path, None)
        else:
            return None
    return buckets + list(live.values())


def _apply(app: WsgiApp, record: dict[str, Any]) -> None:
    from werkzeug.test import Client

    headers = {k: v for k, v in record["headers"].items() if k not in ("Content-Length", "Transfer-Encoding")}
    Client(app).open(record["path"], method=record["method"], query_string=record["query"], headers=headers,
                     data=base64.b64decode(record["body"]))


def replay(app: WsgiApp, journal: Path) -> int:
    """Rebuild the state the journal records into ``app`` and rewrite the journal compacted (so
    restarts stay fast as the run goes on); returns how many requests were applied. Objects go
    straight into moto's S3 backend: a request through moto's dispatch costs milliseconds, and a
    long run's journal holds thousands."""
    if not journal.exists():
        return 0
    records = _records(journal)
    compacted = compact(records)
    if compacted is None:
        for record in records:
            _apply(app, record)
        return len(records)
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    for record in compacted:
        bucket, _, key = record["path"].lstrip("/").partition("/")
        if key:
            s3_backends[DEFAULT_ACCOUNT_ID]["aws"].put_object(bucket, key, base64.b64decode(record["body"]))
        else:
            _apply(app, record)
    tmp = journal.with_name(journal.name + ".compacted")
    tmp.write_bytes(b"".join((json.dumps(r) + "\n").encode() for r in compacted))
    os.replace(tmp, journal)
    return len(compacted)


def cut_torn_tail(journal: Path) -> None:
    """Drop a record the kill tore (no newline yet): the next one must not be appended to it."""
    if not journal.exists():
        return
    data = journal.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(journal, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def serve(port: int, journal: Path) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    app = DomainDispatcherApplication(create_backend_app)
    cut_torn_tail(journal)
    applied = replay(app, journal)
    server = make_server("127.0.0.1", port, journaled(app, journal), threaded=True,  # type: ignore[arg-type]
                         request_handler=MotoRequestHandler)
    print(f"{READY}127.0.0.1:{port} (replayed {applied} requests)", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


# -- from the test's side ------------------------------------------------------------------------------


class JournaledS3Server:
    """The server process on a fixed port (below the ephemeral range, so no client connection takes
    the port while the server is down)."""

    def __init__(self, journal: Path, port: int | None = None) -> None:
        self.journal = journal
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[str] | None = None
        self.log_path = journal.with_name(journal.name + ".stderr.log")
        self.kills = 0
        self.freezes = 0
        self.frozen = False
        self.restart_seconds: list[float] = []

    def start(self, timeout_s: float = 60.0) -> JournaledS3Server:
        assert self.proc is None or self.proc.poll() is not None
        started = time.monotonic()
        with open(self.log_path, "a") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.helpers.s3_server", "--port", str(self.port),
                 "--journal", str(self.journal)],
                cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True, env={**os.environ, **S3_ENV})
        assert self.proc.stdout is not None
        line = ""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line or line.startswith(READY):
                break
        if not line.startswith(READY):
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the S3 server did not start: {self.log_tail()}")
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self.restart_seconds.append(time.monotonic() - started)
        return self

    def sigkill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.kills += 1

    def freeze(self) -> None:
        """SIGSTOP: connections are still accepted (by the kernel), requests hang."""
        assert self.proc is not None
        if not self.frozen:
            self.proc.send_signal(signal.SIGSTOP)
            self.frozen = True
            self.freezes += 1

    def freeze_for(self, seconds: float) -> None:
        self.freeze()
        time.sleep(seconds)
        self.thaw()

    def thaw(self) -> None:
        if self.frozen and self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)
            self.frozen = False

    def stop(self) -> None:
        self.thaw()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def objects(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Key -> size of every object under ``prefix`` (retried while the server comes up)."""
        out: dict[str, int] = {}

        def list_all() -> bool:
            out.clear()
            try:
                pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                for page in pages:
                    for obj in page.get("Contents", []):
                        out[obj["Key"]] = int(obj["Size"])
            except Exception:
                return False
            return True

        if not wait_until(list_all, 30, 0.5):
            raise AssertionError(f"could not list s3://{bucket}/{prefix}: {self.log_tail()}")
        return dict(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--journal", type=Path, required=True)
    args = parser.parse_args(argv)
    os.environ.update(S3_ENV)
    serve(args.port, args.journal)


if __name__ == "__main__":
    main()
