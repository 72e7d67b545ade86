"""Segment roll jitter is drawn from the randomness the log is given, so a seeded run replays."""

from __future__ import annotations

import random
from pathlib import Path

from tierlog.config import LogConfig
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.storage.log import random_roll_jitter_ms


def test_jitter_is_drawn_from_the_given_random(tmp_path: Path) -> None:
    config = LogConfig(segment_jitter_ms=100_000, segment_ms=1_000_000)
    expected = random.Random(5).randrange(100_000)
    assert random_roll_jitter_ms(config, random.Random(5)) == expected
    ulog = load_log(tmp_path / "t-0", config, LoadOptions(), rng=random.Random(5))
    try:
        active = ulog.segments.last
        assert active is not None and active.roll_jitter_ms == expected
    finally:
        ulog.close()


def test_no_jitter_without_a_bound() -> None:
    assert random_roll_jitter_ms(LogConfig(segment_jitter_ms=0), random.Random(1)) == 0
