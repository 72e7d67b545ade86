"""The short exactly-once crash loop of the test command: a transactional consume-transform-produce
application while the broker is SIGKILLed at random moments; read_committed output holds every input
exactly once."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.reliability.txn_loop import run_txn_loop

pytestmark = pytest.mark.integration


def test_consume_transform_produce_is_exactly_once_across_sigkills(tmp_path: Path) -> None:
    seed = random.randrange(1 << 32)
    result = run_txn_loop(tmp_path / "data", inputs=3000, kills=4, seed=seed)
    about = f"seed {seed}: {result}"
    assert result.finished, about
    assert result.kills >= 4 and result.commits > 0, about
    assert result.lost == 0 and result.duplicated == 0, about
