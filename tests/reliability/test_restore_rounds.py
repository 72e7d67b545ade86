"""The short version of the restore rounds (``bench/chaos.py --only remote`` runs the long one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.seeds import test_seed
from tests.reliability.restore_rounds import run_restore_rounds

pytestmark = pytest.mark.integration


def test_partitions_wiped_and_restored_round_after_round(tmp_path: Path) -> None:
    seed = test_seed("restore-rounds")
    result = run_restore_rounds(tmp_path / "rounds", rounds=3, partitions=2, records_per_round=2000, seed=seed)
    about = f"seed {seed} (TIERLOG_TEST_SEED_RESTORE_ROUNDS={seed} replays it): {result.summary()}\n{result}"
    assert result.ok, about
    assert result.lost_tiered == 0 and result.offsets_reused == 0 and result.duplicated == 0, about
    assert result.wrong_restart_offsets == [] and result.read_errors == [], about
    # It proves something only if partitions were really rebuilt from the remote tier.
    assert result.partitions_wiped >= 3 and result.restores_logged >= result.partitions_wiped, about
    assert result.acked == 6000, about
