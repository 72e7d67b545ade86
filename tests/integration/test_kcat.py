"""kcat (librdkafka's command-line client): list metadata, produce, consume."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers.broker import BrokerProcess

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(
    KCAT is None, reason="kcat is not on PATH (scripts/test installs it with `apt-get install kcat`)")


def kcat(*args: str, stdin: str | None = None, timeout: float = 60.0) -> str:
    assert KCAT is not None
    done = subprocess.run([KCAT, *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kcat_list_produce_consume(broker: BrokerProcess, topic_name: str) -> None:
    lines = [f"k{i}:value-{i}" for i in range(100)]
    kcat("-b", broker.bootstrap, "-P", "-t", topic_name, "-K:", "-z", "snappy", stdin="\n".join(lines) + "\n")

    listing = kcat("-b", broker.bootstrap, "-L", "-t", topic_name)
    assert "1 brokers:" in listing
    assert f"broker 1 at 127.0.0.1:{broker.port}" in listing
    assert f'topic "{topic_name}" with 1 partitions' in listing
    assert "partition 0, leader 1, replicas: 1, isrs: 1" in listing

    out = kcat("-b", broker.bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-e", "-f", "%k:%s:%o\n")
    assert out.splitlines() == [f"{line}:{offset}" for offset, line in enumerate(lines)]

    tail = kcat("-b", broker.bootstrap, "-C", "-t", topic_name, "-o", "-5", "-e", "-f", "%s\n")
    assert tail.splitlines() == [f"value-{i}" for i in range(95, 100)]


def test_kcat_consumer_group(broker: BrokerProcess, topic_name: str) -> None:
    kcat("-b", broker.bootstrap, "-P", "-t", topic_name, stdin="".join(f"m{i}\n" for i in range(50)))
    group = f"g-{topic_name}"
    out = kcat("-b", broker.bootstrap, "-G", group, topic_name, "-o", "beginning", "-e", "-f", "%s\n",
               "-X", "auto.offset.reset=earliest")
    assert sorted(out.splitlines()) == sorted(f"m{i}" for i in range(50))
