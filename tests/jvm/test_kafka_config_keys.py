"""src/tierlog/config/kafka_keys.py is exactly what the pinned Kafka's ConfigDefs say (regenerate with
scripts/gen_kafka_keys.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.jvm.kafka import ROOT


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_kafka_keys", ROOT / "scripts" / "gen_kafka_keys.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kafka_keys_module_is_current(kafka_jars: None) -> None:
    gen = _generator()
    expected = gen.render(gen.kafka_keys_tsv())
    assert Path(gen.OUT).read_text() == expected, "stale: run scripts/gen_kafka_keys.py"
