"""Seeds of randomized tests: printed, so a failing run shows them (pytest shows a failed test's
output), and replayable: ``TIERLOG_TEST_SEED=<seed>`` makes every randomized test draw that seed
(``TIERLOG_TEST_SEED_<NAME>`` only the one named, e.g. ``TIERLOG_TEST_SEED_CRASH_LOOP``)."""

from __future__ import annotations

import os
import random

ENV = "TIERLOG_TEST_SEED"


def test_seed(name: str, bound: int = 1 << 32) -> int:
    """A seed in ``[0, bound)`` for the randomized test ``name``: the replay variable's, else a fresh one."""
    key = f"{ENV}_{name.upper().replace('-', '_')}"
    given = os.environ.get(key) or os.environ.get(ENV)
    seed = int(given) if given else random.randrange(bound)
    print(f"{name}: seed {seed} (replay with {key}={seed})")
    return seed


test_seed.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test, despite its name
