"""Kafka Streams, Kafka Connect and MirrorMaker 2 (Apache Kafka 4.3.1, unchanged) on tierlog."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.helpers.broker import BrokerProcess
from tests.jvm.kafka import (
    CONNECT_DISTRIBUTED,
    MIRROR_MAKER,
    compiled_classes,
    free_port,
    java_command,
    wait_for,
)

WORDS = {"the": 75, "quick": 25, "brown": 25, "fox": 50, "jumps": 25, "over": 25, "lazy": 25, "dog": 75,
         "barks": 25, "a": 50, "and": 25}


def _word_count(broker: BrokerProcess, state_dir: Path, guarantee: str) -> subprocess.CompletedProcess[str]:
    app = f"wc-{uuid.uuid4().hex[:6]}"
    return subprocess.run(java_command("WordCount", [broker.bootstrap, app, str(state_dir), guarantee], heap="384m",
                                       extra_cp=[compiled_classes()]),
                          capture_output=True, text=True, timeout=240)


def test_streams_word_count_at_least_once(kafka_jars: None, tierlog_broker: BrokerProcess, tmp_path: Path) -> None:
    proc = _word_count(tierlog_broker, tmp_path, "at_least_once")
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-5000:]}\n{tierlog_broker.stderr_tail()}"
    counts = {line.split()[1]: int(line.split()[2]) for line in proc.stdout.splitlines() if line.startswith("count ")}
    assert counts == WORDS
    # The state store's changelog and the repartition topic live on tierlog, and the changelog
    # (cleanup.policy=compact, as Streams creates it) is compacted by the log cleaner.
    log = tierlog_broker.log_path.read_text()
    assert "-counts-changelog" in log and "-counts-repartition" in log

    def changelog_cleaned() -> bool:
        out = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "cleaner", "status", "--json", "--data-dir",
                              str(tierlog_broker.data_dir)], capture_output=True, text=True, timeout=60).stdout
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        return any(r["topic"].endswith("-counts-changelog") and r.get("bytes_cleaned", 0) > 0 for r in rows)

    wait_for(changelog_cleaned, 90, "the changelog to be compacted by the log cleaner")


def test_streams_exactly_once_v2(kafka_jars: None, tierlog_broker: BrokerProcess, tmp_path: Path) -> None:
    """processing.guarantee=exactly_once_v2: every task's output, changelog writes and offset commits in
    one transaction (InitProducerId with a transactional.id, AddPartitionsToTxn, TxnOffsetCommit, EndTxn);
    the counts are read back read_committed."""
    proc = _word_count(tierlog_broker, tmp_path, "exactly_once_v2")
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-5000:]}\n{tierlog_broker.stderr_tail()}"
    counts = {line.split()[1]: int(line.split()[2]) for line in proc.stdout.splitlines() if line.startswith("count ")}
    assert counts == WORDS


def _post(url: str, body: dict[str, object]) -> None:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status in (200, 201), resp.read()


def _rest_up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False


def _worker(props: dict[str, str], home: Path, main: str = CONNECT_DISTRIBUTED) -> subprocess.Popen[bytes]:
    path = home / "worker.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    log = open(home / "worker.log", "ab")  # noqa: SIM115 - owned by the process
    proc = subprocess.Popen(java_command(main, [str(path)], heap="384m"), stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_connect_distributed_file_source_to_file_sink(kafka_jars: None, tierlog_broker: BrokerProcess,
                                                      tmp_path: Path) -> None:
    """A distributed Connect worker keeps its config, offset and status topics on tierlog and moves a
    file through a tierlog topic: FileStreamSource → tierlog → FileStreamSink."""
    name = f"connect-{uuid.uuid4().hex[:6]}"
    port = free_port()
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    lines = [f"line {i} {uuid.uuid4().hex}" for i in range(200)]
    source.write_text("".join(f"{line}\n" for line in lines))
    worker = _worker({
        "bootstrap.servers": tierlog_broker.bootstrap, "group.id": name,
        "config.storage.topic": f"{name}-configs", "offset.storage.topic": f"{name}-offsets",
        "status.storage.topic": f"{name}-status", "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
        "offset.storage.partitions": "2", "status.storage.partitions": "2",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "offset.flush.interval.ms": "500", "listeners": f"http://127.0.0.1:{port}",
        "plugin.discovery": "only_scan",
    }, tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: worker.poll() is not None or _rest_up(f"{url}/connectors"), 120, "the Connect REST API")
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-5000:]
        topic = f"{name}-data"
        _post(f"{url}/connectors", {"name": f"{name}-src", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "tasks.max": "1",
            "file": str(source), "topic": topic}})
        _post(f"{url}/connectors", {"name": f"{name}-sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "tasks.max": "1",
            "file": str(sink), "topics": topic}})
        wait_for(lambda: sink.exists() and sink.read_text().splitlines() == lines, 120,
                 "the sink file to hold every line")
        # The worker created its internal topics compacted (what the log cleaner then compacts).
        admin = AdminClient({"bootstrap.servers": tierlog_broker.bootstrap})
        internal = [ConfigResource(ConfigResource.Type.TOPIC, f"{name}-{kind}") for kind in ("configs", "offsets", "status")]
        policies = {r.name: f.result()["cleanup.policy"].value for r, f in admin.describe_configs(internal).items()}
        assert policies == {r.name: "compact" for r in internal}, policies
    except AssertionError:
        raise AssertionError(f"{(tmp_path / 'worker.log').read_text()[-6000:]}\n{tierlog_broker.stderr_tail()}") from None
    finally:
        _stop(worker)


def test_mirror_maker_2_between_two_tierlog_brokers(kafka_jars: None, tierlog_broker: BrokerProcess,
                                                    tmp_path: Path) -> None:
    """MirrorMaker 2 (dedicated mode) copies a topic from one tierlog broker to another: records,
    keys and values arrive in the target's ``A.<topic>``."""
    target = BrokerProcess(tmp_path / "target").start()
    topic = f"mm2-{uuid.uuid4().hex[:6]}"
    p = Producer({"bootstrap.servers": tierlog_broker.bootstrap, "enable.idempotence": True})
    for i in range(300):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert p.flush(30) == 0
    props = {"clusters": "A, B", "A.bootstrap.servers": tierlog_broker.bootstrap, "B.bootstrap.servers": target.bootstrap,
             "A->B.enabled": "true", "A->B.topics": topic, "B->A.enabled": "false",
             "replication.factor": "1", "checkpoints.topic.replication.factor": "1",
             "heartbeats.topic.replication.factor": "1", "offset-syncs.topic.replication.factor": "1",
             "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
             "config.storage.replication.factor": "1", "refresh.topics.interval.seconds": "1",
             "sync.topic.configs.enabled": "false", "sync.topic.acls.enabled": "false",
             "emit.checkpoints.interval.seconds": "1", "plugin.discovery": "only_scan"}
    mm2 = _worker(props, tmp_path, MIRROR_MAKER)
    seen: dict[bytes, bytes] = {}
    c = Consumer({"bootstrap.servers": target.bootstrap, "group.id": f"{topic}-check",
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": "1000"})
    try:
        c.subscribe([f"A.{topic}"])

        def mirrored() -> bool:
            assert mm2.poll() is None, (tmp_path / "worker.log").read_text()[-5000:]
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen[m.key()] = m.value()
            return len(seen) == 300

        wait_for(mirrored, 180, f"A.{topic} on the target to hold every record")
        assert all(seen[f"k{i}".encode()] == f"v{i}".encode() for i in range(300))
    except AssertionError:
        raise AssertionError(f"{(tmp_path / 'worker.log').read_text()[-6000:]}\n{target.stderr_tail()}") from None
    finally:
        c.close()
        _stop(mm2)
        target.stop()
