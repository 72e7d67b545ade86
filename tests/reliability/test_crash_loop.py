"""The short crash loop of the test command (``bench/chaos.py`` runs the long one): a broker SIGKILLed
at random moments under an idempotent acks=all librdkafka producer and a committing consumer group."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.seeds import test_seed
from tests.reliability.crash_loop import run_crash_loop

pytestmark = pytest.mark.integration


def test_sigkill_loop_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    seed = test_seed("crash-loop")
    result = run_crash_loop(tmp_path / "data", kills=4, partitions=3, rate=3000, max_uptime_s=2.5,
                            kill_while_starting=0.25, seed=seed)
    about = f"seed {seed}: {result}"
    assert result.ok, about
    assert result.kills >= 4, about
    # The run proves something only when records were acknowledged between kills and commits landed.
    assert result.acked > 5000 and result.commits > 0, about
    assert result.lost == 0 and result.duplicated == 0, about
    # Every record the producer sent was eventually acknowledged: idempotent retries across restarts
    # neither fail nor get fenced.
    assert result.delivery_failures == 0 and result.producer_fatal_errors == 0, about
    assert result.records_in_log == result.acked == result.sent, about
