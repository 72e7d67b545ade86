"""Progress of a Spark job: ``tierlog spark JOB`` turns on Spark's console progress bar (stage
bars on stderr) so a long job over many segments shows it moves — and turns it off with ``--json``,
whose stdout and stderr a script reads. Checked at the one place the CLI asks for a session, so no
JVM starts."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark command needs pyspark (pip install -e '.[dev]')")

import tierlog.pipeline
from tierlog.cli.main import build_parser
from tierlog.errors import TierlogError


def _session_conf(args: list[str], monkeypatch: pytest.MonkeyPatch) -> Mapping[str, str]:
    asked: list[Mapping[str, str]] = []

    def spark_session(master: str | None = None, *, app_name: str = "tierlog",
                      conf: Mapping[str, str] | None = None) -> object:
        asked.append(dict(conf or {}))
        raise TierlogError("no Spark in this test")

    monkeypatch.setattr(tierlog.pipeline, "spark_session", spark_session, raising=False)
    parsed = build_parser().parse_args(args)
    assert parsed.func(parsed) == 1  # the stand-in's error, reported as one line
    assert len(asked) == 1
    return asked[0]


@pytest.mark.parametrize("job", ["usage", "verify", "retention-preview"])
def test_jobs_show_spark_progress_on_the_console(job: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = _session_conf(["spark", job, "--path", str(tmp_path)], monkeypatch)
    assert conf["spark.ui.showConsoleProgress"] == "true"


def test_json_output_has_no_progress_bar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = _session_conf(["spark", "usage", "--path", str(tmp_path), "--json"], monkeypatch)
    assert conf["spark.ui.showConsoleProgress"] == "false"


def test_without_path_or_config_the_embedded_data_dir_is_read() -> None:
    """As `tierlog serve` and `tierlog tier status` with no config: ./tierlog-data."""
    from tierlog.cli.spark_cmd import _options

    parsed = build_parser().parse_args(["spark", "usage"])
    assert _options(parsed)["path"] == "tierlog-data"
    parsed = build_parser().parse_args(["spark", "usage", "--path", "/a,/b", "--path", "/c"])
    assert _options(parsed)["path"] == "/a,/b,/c"
