"""Tiered-storage test helpers: batches, tiered log configs, an environment of logs with a remote tier, and an S3 server (moto, in this process)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.storage.log import UnifiedLog
from tierlog.testing.clock import ManualClock, ManualScheduler
from tierlog.tiered.api import RemoteLogMetadataManager, RemoteStorageManager
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

T0 = 1_700_000_000_000


MOTO_SKIP = "moto[server] is not importable: the S3 backend tests need it (pip install 'moto[server]' boto3)"


S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def batch(n: int = 1, *, value_size: int = 100, ts: int = T0, producer_id: int = -1, producer_epoch: int = -1,
          base_sequence: int = -1, seed: int = 0) -> bytes:
    records = [SimpleRecord(b"k%d" % i, bytes([65 + (seed + i) % 26]) * value_size, timestamp=ts + i)
               for i in range(n)]
    return build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)


def tiered_config(**overrides: object) -> LogConfig:
    props: dict[str, object] = {"segment.bytes": 2048, "remote.storage.enable": True, "retention.ms": -1,
                                "file.delete.delay.ms": 0}
    props.update(overrides)
    return LogConfig.from_props(props)


class Logs:
    """A minimal LogSource: logs opened by the test, keyed by (topic, partition)."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], UnifiedLog] = {}

    def all_logs(self) -> dict[tuple[str, int], UnifiedLog]:
        return dict(self.logs)

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self.logs.get((topic, partition))


@dataclass
class Env:
    root: Path
    clock: ManualClock
    scheduler: ManualScheduler
    logs: Logs = field(default_factory=Logs)

    def open_log(self, name: str = "t-0", config: LogConfig | None = None, *, clean: bool = True,
                 topic_id: bytes | None = b"\x01" * 16, expiration_ms: int = 86_400_000) -> UnifiedLog:
        opts = LoadOptions(had_clean_shutdown=clean, producer_id_expiration_ms=expiration_ms)
        ulog = load_log(self.root / "data" / name, config or tiered_config(), opts, clock=self.clock)
        if topic_id is not None:
            ulog.write_partition_metadata(topic_id)
        self.logs.logs[(ulog.topic, ulog.partition)] = ulog
        return ulog

    def rlmm(self) -> FileRemoteLogMetadataManager:
        return FileRemoteLogMetadataManager(self.root / "data" / "remote-log-metadata")

    def rlm(self, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager | None = None, *,
            scheduler: bool = False, **config: object) -> RemoteLogManager:
        settings: dict[str, object] = {"system_enable": True, "task_interval_ms": 1000}
        settings.update(config)
        return RemoteLogManager(
            RemoteLogManagerConfig(**settings),  # type: ignore[arg-type]
            self.logs, rsm, rlmm if rlmm is not None else self.rlmm(),
            index_cache_dir=self.root / "data" / "remote-log-index-cache", clock=self.clock,
            scheduler=self.scheduler if scheduler else None,
            status_path=self.root / "data" / "remote-log-metadata" / "tier-status")


def fill(ulog: UnifiedLog, batches: int, *, per_batch: int = 3, ts_step: int = 1000,
         start_ts: int = T0, producer: Callable[[int], tuple[int, int, int]] | None = None) -> None:
    """Append ``batches`` batches (timestamps rising by ``ts_step``); ``producer(i)`` may give
    (producer id, epoch, base sequence) for batch i."""
    for i in range(batches):
        pid, epoch, seq = producer(i) if producer is not None else (-1, -1, -1)
        ulog.append_as_leader(batch(per_batch, ts=start_ts + i * ts_step, producer_id=pid, producer_epoch=epoch,
                                    base_sequence=seq, seed=i))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """moto's S3 API server on 127.0.0.1; stop/start keep the objects (moto's state is in-process)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._cls = ThreadedMotoServer
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self.running = True

    def stop(self) -> None:
        if self.running:
            self._server.stop()
            self.running = False

    def start(self) -> None:
        if not self.running:
            self._server = self._cls(ip_address="127.0.0.1", port=self.port, verbose=False)
            self._server.start()
            self.running = True

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                     aws_access_key_id="testing", aws_secret_access_key="testing").create_bucket(Bucket=name)


def s3_props(server: MotoServer, bucket: str, prefix: str = "tiered") -> dict[str, str]:
    return {"s3.bucket": bucket, "s3.endpoint": server.endpoint, "s3.region": "us-east-1", "s3.prefix": prefix,
            "s3.max.retries": "0", "s3.connect.timeout.ms": "1000", "s3.request.timeout.ms": "5000",
            "broker.id": "1"}
