"""``tierlog spark compact`` beside a running broker (issue 18 point 3): ``tierlog serve`` with
``remote.log.compaction.enable=false`` cleans and tiers a compacted topic that confluent-kafka fills
with keyed updates and tombstones, twice over the same keys, the second round only once the first is
tiered (so the remote tier surely holds keys twice: within one round, whether the local cleaner left a
key twice depended on how it and the uploads interleaved, and a loaded run once left the job nothing); the job (the CLI, in this process's Spark session) compacts the
remote tier on the executors and the broker swaps the new segments in. A consumer reading from offset
0 then gets each key's latest value with its original offset, the remote tier holds each key once,
and no object is left that the metadata does not name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.broker import BrokerProcess
from tests.integration.test_remote_compaction import (
    FAST,
    _create,
    _objects_named_by_metadata,
    _produce,
    _read_all,
    _segments,
    _wait,
)
from tierlog.cli.main import main as tierlog_main

pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.integration
TOPIC = "table"


def _tiered(broker: BrokerProcess, last_offset: int) -> bool:
    segs = _segments(broker)
    local = sorted(int(p.stem) for p in (broker.data_dir / f"{TOPIC}-0").glob("*.log"))
    return (bool(segs) and all(state.name == "COPY_SEGMENT_FINISHED" for _, _, state, _, _ in segs)
            and max(end for _, end, _, _, _ in segs) >= last_offset and bool(local) and local[0] > 0)


def test_spark_compact_beside_a_running_broker(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broker = BrokerProcess(tmp_path / "data", {**FAST, "remote.log.compaction.enable": "false"}).start()
    try:
        _create(broker, TOPIC, "compact")
        model: dict[bytes, bytes | None] = {}
        _produce(broker, TOPIC, model)
        round_one = _read_all(broker.bootstrap, TOPIC)
        round_one_last_key = max(o for o, k, _ in round_one if k.startswith(b"key"))
        _wait(broker, "the first round tiered", lambda: _tiered(broker, round_one_last_key))
        _produce(broker, TOPIC, model)
        first = _read_all(broker.bootstrap, TOPIC)
        last_key = max(o for o, k, _ in first if k.startswith(b"key"))
        _wait(broker, "the cleaned segments tiered and the local copies dropped", lambda: _tiered(broker, last_key))
        assert not any(replaces for *_, replaces, _ in _segments(broker)), "the broker compacted the remote tier"
        before = {sid for *_, sid in _segments(broker)}

        capsys.readouterr()
        code = tierlog_main(["spark", "compact", "--path", str(broker.data_dir), "--topic", TOPIC, "--force",
                             "--json", "--timeout", "60"])
        out = capsys.readouterr().out
        assert code == 0, out
        [row] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert row["error"] is None and row["segments_written"] >= 1, row
        assert row["results"] == ["swapped"] * row["segments_written"], (row, broker.stderr_tail())
        assert row["records_kept"] < row["records_read"]

        segs = _segments(broker)
        live = [s for s in segs if s[2].name == "COPY_SEGMENT_FINISHED"]
        assert live and all(replaces for *_, replaces, _ in live) and not before & {sid for *_, sid in live}
        records = _read_all(broker.bootstrap, TOPIC)
        offsets = [o for o, _, _ in records]
        assert offsets == sorted(set(offsets)), "an offset twice or out of order"
        remote_end = max(end for _, end, _, _, _ in live)
        remote_keys = [k for o, k, _ in records if o <= remote_end]
        assert len(remote_keys) == len(set(remote_keys)), "a key twice in the compacted remote tier"
        assert len(records) < len(first)
        original = {o: (k, v) for o, k, v in first}
        assert all(original[o] == (k, v) for o, k, v in records), "an offset moved or changed"
        table: dict[bytes, bytes | None] = {}
        for _, k, v in records:
            table[k] = v
        assert {k: v for k, v in table.items() if v is not None} == {k: v for k, v in model.items() if v is not None}
        _wait(broker, "the replaced segments deleted", lambda: all(
            s[2].name == "COPY_SEGMENT_FINISHED" for s in _segments(broker)))
        _objects_named_by_metadata(broker, {})
        assert "compaction job" in broker.stderr_tail(2000)
        assert not list((broker.data_dir / "remote-log-metadata" / "compaction-requests").glob("*"))
    finally:
        if broker.alive():
            assert broker.stop() == 0, broker.stderr_tail()
