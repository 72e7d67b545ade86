"""A few power cuts under idempotent acks=all librdkafka load (``bench/chaos.py`` would run the long
loop): with durable acknowledgements (tierlog's default) nothing acknowledged is lost or duplicated;
with Kafka's behaviour (``log.durable.acks=none``) the harness is shown to bite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.seeds import test_seed
from tests.reliability.power_loss import fuse_available, run_power_loss

pytestmark = pytest.mark.integration

UNAVAILABLE = fuse_available()


@pytest.mark.skipif(UNAVAILABLE is not None, reason=f"lazyfs cannot run: {UNAVAILABLE}")
def test_power_cuts_lose_nothing_acknowledged_with_durable_acks(tmp_path: Path) -> None:
    seed = test_seed("power-loss")
    result = run_power_loss(tmp_path, cuts=3, durable_acks="all", seed=seed)
    loop = result.loop
    about = f"harness {result.harness}, seed {seed} (TIERLOG_TEST_SEED_POWER_LOSS={seed} replays it): {result}"
    print(about)
    assert result.cuts == 3 and loop.kills == 3, about
    # The cuts must have had something to drop, or they prove nothing.
    assert sum(result.bytes_lost_at_cuts) > 0, about
    assert loop.acked > 500 and loop.commits > 0, about
    assert loop.ok and loop.lost == 0 and loop.duplicated == 0, about
    # The metadata log through the cuts: every acknowledged topic creation is still there.
    assert result.topics_created >= 3 and not result.topics_missing, about
    assert loop.delivery_failures == 0 and loop.records_in_log == loop.acked == loop.sent, about


@pytest.mark.skipif(UNAVAILABLE is not None, reason=f"lazyfs cannot run: {UNAVAILABLE}")
def test_power_cuts_with_kafkas_behaviour_lose_acknowledged_records(tmp_path: Path) -> None:
    seed = test_seed("power-loss")
    result = run_power_loss(tmp_path, cuts=2, durable_acks="none", seed=seed)
    about = f"harness {result.harness}, seed {seed} (TIERLOG_TEST_SEED_POWER_LOSS={seed} replays it): {result}"
    print(about)
    # Acknowledged on append, flushed only at rolls: a power cut takes the tail of the page cache.
    assert result.loop.lost > 0, about


@pytest.mark.skipif(UNAVAILABLE is not None, reason=f"lazyfs cannot run: {UNAVAILABLE}")
def test_power_cuts_with_tiering_lose_nothing_acknowledged(tmp_path: Path) -> None:
    """Segments tiered as soon as they close and deleted locally: the records below the local log
    start are found through the remote log metadata journal, which goes through the cuts."""
    seed = test_seed("power-loss-tiered")
    result = run_power_loss(tmp_path, cuts=3, durable_acks="all", seed=seed, tiered=True)
    loop = result.loop
    about = f"harness {result.harness}, seed {seed} (TIERLOG_TEST_SEED_POWER_LOSS_TIERED={seed} replays it): {result}"
    print(about)
    remote = list((tmp_path / "remote").rglob("*.log"))
    assert result.cuts == 3 and remote, about  # segments did go to the remote tier
    assert loop.ok and loop.lost == 0 and loop.duplicated == 0 and not result.topics_missing, about
    assert loop.records_in_log == loop.acked == loop.sent, about
