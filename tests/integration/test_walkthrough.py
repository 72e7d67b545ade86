"""The page runner itself (tests/integration/walkthrough.py): a failing step prints the broker's log
tail, not only the command's own output -- a docs page that greps the broker's log for a line that
is not there must say what the broker did say."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.walkthrough import (
    SPARK_TIMEOUT_S,
    Command,
    Expectation,
    Session,
    contains,
    run_page,
    timeout_of,
)

pytestmark = pytest.mark.integration

PAGE = [
    "source .venv/bin/activate",
    "tierlog serve --override log.dirs=tierlog-data > tierlog.log 2>&1 &",
    'until grep -qs "tierlog listening on" tierlog.log; do kill -0 %1 || break; sleep 0.2; done',
    'grep "a line the broker never writes" tierlog.log',
]


def run(tmp_path: Path, commands: list[str], expectations: list[Expectation]) -> str:
    session = Session(tmp_path / "page")
    try:
        with pytest.raises(AssertionError) as failed:
            run_page(session, [Command(c, i + 1) for i, c in enumerate(commands)], expectations, page="page.md",
                     every_command_checked=False)
    finally:
        session.close()
    return str(failed.value)


def test_a_failing_step_prints_the_broker_log_tail(tmp_path: Path) -> None:
    message = run(tmp_path, PAGE, [])
    assert "page.md:4: non-zero exit" in message
    assert "--- broker log tierlog.log (last " in message
    assert "tierlog listening on 127.0.0.1:" in message, message


def test_a_failing_check_prints_it_too(tmp_path: Path) -> None:
    page = [*PAGE[:3], "echo hello"]
    message = run(tmp_path, page, [Expectation(r"^echo hello$", contains("goodbye"))])
    assert "expected 'goodbye' in stdout" in message
    assert "tierlog listening on 127.0.0.1:" in message, message


def test_without_a_broker_it_says_so(tmp_path: Path) -> None:
    message = run(tmp_path, ["false"], [])
    assert "no broker log" in message


def test_a_command_that_starts_spark_gets_the_spark_timeout() -> None:
    quick = Expectation("", timeout_s=60)
    assert timeout_of("tierlog spark export --path d --topic t --output a", quick) == SPARK_TIMEOUT_S
    assert timeout_of("python - <<'EOF'\nfrom tierlog.pipeline import spark_session\nspark = spark_session()", quick) \
        == SPARK_TIMEOUT_S
    assert timeout_of("tierlog topics list", quick) == 60
