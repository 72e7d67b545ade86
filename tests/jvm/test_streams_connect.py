"""Kafka Streams, Kafka Connect and MirrorMaker 2 (Apache Kafka 4.3.1, unchanged) on tierlog."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests.integration.conftest import BrokerProcess
from tests.jvm.kafka import compiled_classes, java_command

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
    # The state store's changelog and the repartition topic live on tierlog.
    log = tierlog_broker.log_path.read_text()
    assert "-counts-changelog" in log and "-counts-repartition" in log


def test_streams_exactly_once_v2(kafka_jars: None, tierlog_broker: BrokerProcess, tmp_path: Path) -> None:
    pytest.skip("processing.guarantee=exactly_once_v2 needs transactions (InitProducerId with a "
                "transactional.id, AddPartitionsToTxn, EndTxn): tierlog has none yet, issue 17")
