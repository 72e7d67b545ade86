"""Disk damage, the short version (``bench/chaos.py`` runs many rounds): a few rounds of byte flips and
truncations in a stopped broker's files, after clean shutdowns and SIGKILLs, with every segment or
only the active one checked at startup; every kind of file is damaged in at least one round. Two
rounds are drawn from a random seed, printed on failure (``plan_round(seed)`` replays one, and
``TIERLOG_TEST_SEED_DISK_DAMAGE=<seed>`` the test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.seeds import test_seed
from tests.reliability.disk_damage import KINDS, RoundPlan, plan_round, run_planned_round

#: Every test here starts a real broker process.
pytestmark = pytest.mark.integration

FIXED = [
    # Every kind at once, after a clean shutdown: nothing is recovered, so reads must find the damage.
    RoundPlan(11, clean_shutdown=True, lazy=False, kinds=KINDS),
    RoundPlan(12, clean_shutdown=True, lazy=True, kinds=KINDS),
    # ... and after a SIGKILL, where recovery scans the segments.
    RoundPlan(13, clean_shutdown=False, lazy=True, kinds=KINDS),
    # A segment file alone; and the metadata log where no snapshot holds the topic (the defaults).
    RoundPlan(14, clean_shutdown=True, lazy=True, kinds=("log",)),
    RoundPlan(15, clean_shutdown=True, lazy=False, kinds=("metadata-log", "leader-epoch"), frequent_snapshots=False),
    # Every kind with the default snapshot settings: there is no metadata snapshot to damage.
    RoundPlan(16, clean_shutdown=True, lazy=True, kinds=KINDS, frequent_snapshots=False),
]
_SEED = test_seed("disk-damage", 1_000_000)
#: Two rounds: the seed drawn (or replayed) and the one after it. Their test ids name no seed: each
#: pytest-xdist worker imports this module and draws its own, and every worker must collect the same ids
#: (the seed is in the failure message and the test's output).
RANDOM = [pytest.param(plan_round(_SEED), id="drawn-seed"),
          pytest.param(plan_round((_SEED + 1) % 1_000_000), id="drawn-seed-plus-1")]


@pytest.mark.parametrize("plan", [pytest.param(p, id=f"seed{p.seed}") for p in FIXED] + RANDOM)
def test_damaged_files_never_cost_records_before_the_damage(plan: RoundPlan, tmp_path: Path) -> None:
    print(f"disk-damage round: seed {plan.seed} (replay with plan_round({plan.seed}))")
    result = run_planned_round(tmp_path, plan)
    assert result.ok, f"replay with plan_round({plan.seed}) or {plan}:\n{result.describe()}"
    if plan.kinds == KINDS and plan.clean_shutdown:
        # Every kind had a file to damage, so the round covered them all -- but a metadata snapshot
        # exists only where the round asked for frequent ones (the defaults take none this soon).
        expected = set(KINDS) if plan.frequent_snapshots else set(KINDS) - {"metadata-snapshot"}
        assert expected <= {d.kind for d in result.damages}, result.describe()
