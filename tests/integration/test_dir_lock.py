"""A running broker owns its data directory: a second broker on it stops with one clear line, and
the offline metadata tools refuse to touch it, while a backup snapshot can still be taken."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tierlog.metadata.snapshot import load_snapshot


def _tierlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tierlog.cli.main", *args], capture_output=True, text=True,
                          timeout=120)


def test_second_broker_and_offline_tools_are_refused_and_backups_work(own_broker: BrokerProcess,
                                                                       tmp_path: Path) -> None:
    data = own_broker.data_dir
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    admin.create_topics([NewTopic("locked-topic", num_partitions=3, replication_factor=1)])["locked-topic"].result(30)

    second = BrokerProcess(data)
    proc = subprocess.run(second.command(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "in use by another process" in proc.stderr, proc.stderr
    assert own_broker.alive()

    refused = _tierlog("metadata", "snapshot", "--data-dir", str(data))
    assert refused.returncode != 0 and "a broker is running" in refused.stderr, refused

    backups = tmp_path / "backups"
    backup = _tierlog("metadata", "snapshot", "--data-dir", str(data), "--output-dir", str(backups))
    assert backup.returncode == 0, backup.stderr
    files = list(backups.glob("*.checkpoint"))
    assert len(files) == 1
    image = load_snapshot(files[0]).image
    assert image.topics_by_name["locked-topic"].partitions.keys() == {0, 1, 2}

    refused = _tierlog("metadata", "restore", str(files[0]), "--data-dir", str(data))
    assert refused.returncode != 0 and "a broker is running" in refused.stderr, refused

    own_broker.stop()
    restored = _tierlog("metadata", "restore", str(files[0]), "--data-dir", str(data))
    assert restored.returncode == 0, restored.stderr
    own_broker.start()
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    assert "locked-topic" in admin.list_topics(timeout=30).topics
