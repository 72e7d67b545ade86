"""The short exactly-once crash loop of the test command: a transactional consume-transform-produce
application, its own process, while it and the broker are SIGKILLed at random moments; read_committed
output holds every input exactly once. ``bench/chaos.py --only txn`` is the long version."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.seeds import test_seed
from tests.reliability.txn_loop import run_txn_loop

pytestmark = pytest.mark.integration


def test_consume_transform_produce_is_exactly_once_across_sigkills_of_broker_and_app(tmp_path: Path) -> None:
    seed = test_seed("txn-loop")
    result = run_txn_loop(tmp_path / "data", inputs=3000, kills=6, seed=seed, force_both=True)
    about = f"seed {seed} (TIERLOG_TEST_SEED_TXN_LOOP={seed} replays it): {result}"
    assert result.finished, about
    assert result.kills >= 6 and result.broker_kills >= 1 and result.app_kills >= 1, about
    assert result.commits > 0 and result.app_starts == result.app_kills + 1, about
    assert result.lost == 0 and result.duplicated == 0, about
