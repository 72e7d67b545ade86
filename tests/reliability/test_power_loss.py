"""A few power cuts under idempotent acks=all librdkafka load (``bench/chaos.py`` would run the long
loop): with durable acknowledgements (tierlog's default) nothing acknowledged is lost or duplicated;
with Kafka's behaviour (``log.durable.acks=none``) the harness is shown to bite. Each scenario runs
under both page-cache models -- lazyfs (FUSE) and the LD_PRELOAD shim, the one CI machines without
/dev/fuse use -- and prints which one ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.seeds import test_seed
from tests.reliability.power_loss import HARNESSES, chosen_harness, harness_unavailable, run_power_loss

pytestmark = pytest.mark.integration


def _require(harness: str) -> None:
    why_not = harness_unavailable(harness)
    if why_not is not None:
        pytest.skip(f"the {harness} power-loss harness cannot run: {why_not}")


@pytest.mark.parametrize("harness", HARNESSES)
def test_power_cuts_lose_nothing_acknowledged_with_durable_acks(tmp_path: Path, harness: str) -> None:
    _require(harness)
    seed = test_seed("power-loss")
    result = run_power_loss(tmp_path, cuts=3, durable_acks="all", seed=seed, harness=harness)
    loop = result.loop
    about = f"harness {result.harness}, seed {seed} (TIERLOG_TEST_SEED_POWER_LOSS={seed} replays it): {result}"
    print(about)
    assert result.harness == harness
    assert result.cuts == 3 and loop.kills == 3, about
    # The cuts must have had something to drop, or they prove nothing.
    assert sum(result.bytes_lost_at_cuts) > 0, about
    assert loop.acked > 500 and loop.commits > 0, about
    assert loop.ok and loop.lost == 0 and loop.duplicated == 0, about
    # The metadata log through the cuts: every acknowledged topic creation is still there.
    assert result.topics_created >= 3 and not result.topics_missing, about
    assert loop.delivery_failures == 0 and loop.records_in_log == loop.acked == loop.sent, about
    # The idempotent producer's state through the cuts, checked directly (producer_probe.py): two
    # cuts with a batch in flight, retried after the restart and stored once; one without, the last
    # acknowledged batch answered as a duplicate with its offset; the snapshots each cut left name
    # only batches sent, at their acknowledged offsets.
    probe = result.probe
    assert not probe.problems, about
    assert probe.retried_kept + probe.retried_appended == 2 and probe.duplicates_answered == 1, about
    assert probe.snapshot_entries_checked > 0 and probe.batches_acknowledged >= 4 * 8, about


@pytest.mark.parametrize("harness", HARNESSES)
def test_power_cuts_with_kafkas_behaviour_lose_acknowledged_records(tmp_path: Path, harness: str) -> None:
    _require(harness)
    seed = test_seed("power-loss")
    result = run_power_loss(tmp_path, cuts=2, durable_acks="none", seed=seed, harness=harness)
    about = f"harness {result.harness}, seed {seed} (TIERLOG_TEST_SEED_POWER_LOSS={seed} replays it): {result}"
    print(about)
    assert result.harness == harness
    # Acknowledged on append, flushed only at rolls: a power cut takes the tail of the page cache.
    assert result.loop.lost > 0, about


def test_power_cuts_with_tiering_lose_nothing_acknowledged(tmp_path: Path) -> None:
    """Segments tiered as soon as they close and deleted locally: the records below the local log
    start are found through the remote log metadata journal, which goes through the cuts. Runs
    under the harness ``TIERLOG_POWER_HARNESS`` names (by default lazyfs where FUSE works)."""
    harness = chosen_harness()
    _require(harness)
    seed = test_seed("power-loss-tiered")
    result = run_power_loss(tmp_path, cuts=3, durable_acks="all", seed=seed, tiered=True, harness=harness)
    loop = result.loop
    about = f"harness {result.harness}, seed {seed} (TIERLOG_TEST_SEED_POWER_LOSS_TIERED={seed} replays it): {result}"
    print(about)
    remote = list((tmp_path / "remote").rglob("*.log"))
    assert result.cuts == 3 and remote, about  # segments did go to the remote tier
    assert loop.ok and loop.lost == 0 and loop.duplicated == 0 and not result.topics_missing, about
    assert loop.records_in_log == loop.acked == loop.sent, about
    assert not result.probe.problems and result.probe.duplicates_answered == 1, about
