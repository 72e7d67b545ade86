"""Randomized tests draw their seed through tests/helpers/seeds.test_seed, so every one prints it and
``TIERLOG_TEST_SEED`` (or ``TIERLOG_TEST_SEED_<NAME>``) replays it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.seeds import test_seed

TESTS = Path(__file__).resolve().parents[1]
#: A seed drawn at random by the test itself: not printed by test_seed, not replayable.
_OWN_DRAW = re.compile(r"\brandom\.(randrange|randint|getrandbits)\(|\brandom\.Random\(\)")


def test_no_test_module_draws_its_own_seed() -> None:
    offenders = [f"{p.relative_to(TESTS)}:{n}: {line.strip()}"
                 for p in sorted(TESTS.rglob("test_*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1) if _OWN_DRAW.search(line)]
    assert offenders == [], "draw the seed with tests.helpers.seeds.test_seed:\n" + "\n".join(offenders)


def test_the_seed_is_printed_and_replayed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TIERLOG_TEST_SEED", raising=False)
    monkeypatch.setenv("TIERLOG_TEST_SEED_TXN_LOOP", "1234")
    assert test_seed("txn-loop") == 1234
    assert "txn-loop: seed 1234 (replay with TIERLOG_TEST_SEED_TXN_LOOP=1234)" in capsys.readouterr().out
    monkeypatch.setenv("TIERLOG_TEST_SEED", "77")
    assert test_seed("restore-rounds") == 77
    drawn = test_seed("txn-loop")
    assert drawn == 1234  # the named variable wins over the general one
