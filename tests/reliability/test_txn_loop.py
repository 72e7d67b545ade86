"""The short exactly-once crash loop of the test command: a transactional consume-transform-produce
application, its own process, while it and the broker are SIGKILLed at random moments; read_committed
output holds every input exactly once. ``bench/chaos.py --only txn`` is the long version.

Its time is bounded by progress (``run_txn_loop``'s ``stall_s``), not by a wall-clock budget: on a
loaded machine a broker restart alone takes 5-15 s (its imports), so a fixed budget failed runs that
were only slow. The steps and their times are printed; on a failure, the broker's log too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.seeds import test_seed
from tests.reliability.txn_app import HANG_EXIT_STATUS
from tests.reliability.txn_loop import ROOT, run_txn_loop

pytestmark = pytest.mark.integration


def test_consume_transform_produce_is_exactly_once_across_sigkills_of_broker_and_app(tmp_path: Path) -> None:
    seed = test_seed("txn-loop")
    result = run_txn_loop(tmp_path / "data", inputs=3000, kills=6, seed=seed, force_both=True)
    about = f"seed {seed} (TIERLOG_TEST_SEED_TXN_LOOP={seed} replays it): {result}"
    print("\n".join(result.steps))
    if not result.ok or result.commits == 0:
        print(result.logs())
    assert result.finished, about
    assert result.kills >= 6 and result.broker_kills >= 1 and result.app_kills >= 1, about
    assert result.commits > 0 and result.app_starts == result.app_kills + result.app_exits + 1, about
    assert result.lost == 0 and result.duplicated == 0, about


def test_the_applications_watchdog_ends_a_process_whose_client_call_hangs() -> None:
    """What stands in for a client call blocked past its timeout (librdkafka#5456) ends the process
    with the watchdog's status and a ``hang`` line, which the loop counts and answers by a restart."""
    code = ("import time, tests.reliability.txn_app as app\n"
            "app.HANG_MARGIN_S = 0.2\n"
            "with app.Watchdog().watch('send_offsets_to_transaction', timeout_s=0.3):\n"
            "    time.sleep(60)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == HANG_EXIT_STATUS, done
    assert done.stdout.startswith("hang: send_offsets_to_transaction still blocked"), done
