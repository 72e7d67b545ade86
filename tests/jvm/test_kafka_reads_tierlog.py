"""Kafka reads tierlog's files: DumpLogSegments and the metadata shell of Apache Kafka 4.3.1 decode
what ``tierlog serve`` wrote, with the values ``tierlog dump-log`` prints.

tierlog writes ``.log`` (all five codecs), ``.index``, ``.timeindex``, producer ``.snapshot`` files,
the metadata log and its ``<offset>-<epoch>.checkpoint`` snapshots; transactional control batches and the
``.txnindex`` are held against Kafka in test_kafka_reads_tierlog_txns.py.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.jvm.dumps import assert_same_values, kafka_dump, parse_dump, tierlog_dump
from tests.jvm.kafka import METADATA_SHELL, run_tool
from tierlog.metadata.snapshot import load_snapshot

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS = 1500


def _topic(codec: str) -> str:
    return f"peer-{codec}"


def _value(i: int, codec: str) -> str:
    # Hex noise, so compressed batches still fill several segments.
    return f"value-{i}-{codec}-" + random.Random(i).randbytes(24).hex()


@pytest.fixture(scope="module")
def tierlog_data(kafka_jars: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped tierlog broker's data dir: five topics (one per codec) of several segments each,
    written by idempotent producers, plus a metadata snapshot."""
    data = tmp_path_factory.mktemp("tierlog-files") / "data"
    broker = BrokerProcess(data).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {"segment.bytes": "12000", "index.interval.bytes": "1024", "retention.ms": "-1"}
        topics = [NewTopic(_topic(c), 2, 1, config={**configs, "compression.type": "producer"}) for c in CODECS]
        for f in admin.create_topics(topics).values():
            f.result(30)
        now_ms = int(time.time() * 1000)
        for codec in CODECS:
            p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                          "compression.type": codec, "linger.ms": 2, "batch.num.messages": 50})
            for i in range(RECORDS):
                p.produce(_topic(codec), key=f"key-{i}".encode(), value=_value(i, codec).encode(),
                          headers=[("h", f"{i}".encode())], timestamp=now_ms + i, partition=i % 2)
            assert p.flush(30) == 0
    finally:
        assert broker.stop() == 0, broker.stderr_tail()
    # A metadata snapshot, written by tierlog into its (stopped) metadata log.
    proc = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "metadata", "snapshot", "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return data


def _files(directory: Path, *suffixes: str) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix in suffixes)


@pytest.mark.parametrize("codec", CODECS)
def test_dump_log_decodes_segments_indexes_and_snapshots(tierlog_data: Path, codec: str) -> None:
    for partition in (0, 1):
        directory = tierlog_data / f"{_topic(codec)}-{partition}"
        files = _files(directory, ".log", ".index", ".timeindex", ".snapshot")
        logs = [f for f in files if f.suffix == ".log"]
        assert len(logs) >= 2, f"expected several segments in {directory}: {files}"
        assert _files(directory, ".snapshot"), f"no producer snapshot in {directory}"
        kafka = parse_dump(kafka_dump(files, "--deep-iteration", "--print-data-log"))
        tierlog = parse_dump(tierlog_dump(files, "--deep-iteration", "--print-data-log"))
        # Kafka prints a producer snapshot entry's timestamp twice (lastTimestamp and timestamp).
        compared = assert_same_values(kafka, tierlog, ignore=frozenset({"timestamp"}))
        records = [e for f in logs for e in kafka[str(f)] if "offset" in e and "baseOffset" not in e]
        assert len(records) == RECORDS // 2
        assert {e["compresscodec"] for f in logs for e in kafka[str(f)] if "baseOffset" in e} == {codec}
        assert [int(e["offset"]) for e in records] == list(range(RECORDS // 2))
        first = records[0]
        assert first["key"] == f"key-{partition}" and first["payload"] == _value(partition, codec)
        assert first["headerKeys"] == "[h]"
        index_entries = [e for f in files if f.suffix == ".index" for e in kafka[str(f)]]
        assert index_entries, "tierlog wrote no offset index entries"
        assert compared > RECORDS // 2


def test_verify_index_only_finds_nothing_wrong(tierlog_data: Path) -> None:
    indexes = [f for c in CODECS for p in (0, 1) for f in _files(tierlog_data / f"{_topic(c)}-{p}", ".index", ".timeindex")]
    out = kafka_dump(indexes, "--verify-index-only")  # kafka_dump fails on any problem Kafka reports
    assert out.count("Dumping ") == len(indexes)


def test_metadata_log_and_snapshot_decode_with_kafkas_metadata_decoder(tierlog_data: Path) -> None:
    meta = tierlog_data / "__cluster_metadata-0"
    logs = _files(meta, ".log")
    snapshots = sorted(meta.glob("*.checkpoint"))
    assert snapshots, f"no metadata snapshot in {meta}"
    kafka_log = parse_dump(kafka_dump(logs, "--cluster-metadata-decoder", "--deep-iteration"))
    tierlog_log = parse_dump(tierlog_dump(logs, "--deep-iteration"))
    # tierlog dump-log prints the payload raw; Kafka's decoder prints it as JSON (checked below).
    assert_same_values(kafka_log, tierlog_log, ignore=frozenset({"payload"}))

    snap_text = kafka_dump(snapshots[-1:], "--cluster-metadata-decoder")
    records = [json.loads(line.split("payload: ", 1)[1]) for line in snap_text.splitlines() if "payload: {" in line]
    topics = {r["data"]["name"]: r["data"]["topicId"] for r in records if r["type"] == "TOPIC_RECORD"}
    assert set(topics) >= {_topic(c) for c in CODECS}
    for name, topic_id in topics.items():
        metadata = (tierlog_data / f"{name}-0" / "partition.metadata").read_text()
        assert f"topic_id: {topic_id}" in metadata, (name, metadata)
    partitions = [r["data"] for r in records if r["type"] == "PARTITION_RECORD"]
    assert sum(1 for p in partitions if p["topicId"] in {topics[_topic(c)] for c in CODECS}) == 2 * len(CODECS)
    configs = {(r["data"]["resourceName"], r["data"]["name"]): r["data"]["value"]
               for r in records if r["type"] == "CONFIG_RECORD"}
    assert configs[(_topic("zstd"), "segment.bytes")] == "12000"
    assert any(r["type"] == "FEATURE_LEVEL_RECORD" and r["data"]["name"] == "metadata.version" for r in records)
    # The snapshot's header and footer control records.
    assert "SnapshotHeader" in snap_text and "SnapshotFooter" in snap_text


def _shell_tree(text: str) -> dict[str, dict[str, str]]:
    """The metadata shell's ``tree /image/configs``: ``TYPE:NAME:`` / ``  key:`` / ``    value``."""
    out: dict[str, dict[str, str]] = {}
    resource = key = ""
    for line in text.splitlines():
        if not line.startswith(" "):
            resource = line.rstrip(":")
            out[resource] = {}
        elif line.startswith("    "):
            out[resource][key] = line.strip()
        else:
            key = line.strip().rstrip(":")
    return out


def _shell(snapshot: Path, *command: str) -> str:
    """The metadata shell's output for one command. Kafka 4.3.1's non-interactive shell can print an
    empty image: MetadataShell.waitUntilCaughtUp returns once the loader has applied an offset, but
    the loader publishes to the shell only after SnapshotFileReader exposes its high-water mark at
    end of file, so a fast first command may run before the publish. Empty output is retried; a
    wrong answer is not."""
    for _ in range(5):
        out = run_tool(METADATA_SHELL, "--snapshot", str(snapshot), *command).stdout
        if out.strip():
            return out
    return out


def test_metadata_shell_reads_tierlog_snapshot(tierlog_data: Path) -> None:
    """kafka-metadata-shell loads tierlog's snapshot and shows the topics and configs tierlog has."""
    snapshot = sorted((tierlog_data / "__cluster_metadata-0").glob("*.checkpoint"))[-1]
    image = load_snapshot(snapshot).image
    ls = _shell(snapshot, "ls", "/image/topics/byName")
    assert set(ls.split()) == set(image.topics_by_name), ls
    tree = _shell(snapshot, "tree", "/image/configs")
    expected = {f"{resource_type.name}:{name}": dict(configs) for (resource_type, name), configs in image.configs.items()}
    assert _shell_tree(tree) == expected
    assert expected[f"TOPIC:{_topic('lz4')}"]["segment.bytes"] == "12000"
