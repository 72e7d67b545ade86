"""``tierlog config docs`` and ``tierlog config validate`` through their parser and through the
``tierlog`` entry point."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tierlog.cli import config_cmd
from tierlog.cli import main as cli_main
from tierlog.config.docs import render_markdown, render_text


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tierlog")
    config_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args))


@pytest.fixture
def through_main(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry point with this subcommand registered (as cli/main.py will list it)."""
    modules = tuple(dict.fromkeys([*cli_main._SUBCOMMAND_MODULES, "tierlog.cli.config_cmd"]))
    monkeypatch.setattr(cli_main, "_SUBCOMMAND_MODULES", modules)


def test_docs_prints_the_markdown_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["config", "docs"]) == 0
    assert capsys.readouterr().out == render_markdown()


def test_docs_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["config", "docs", "--format", "text"]) == 0
    assert capsys.readouterr().out == render_text()


def test_docs_refuses_an_unknown_format(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        run(["config", "docs", "--format", "html"])
    assert info.value.code == 2
    assert "invalid choice: 'html'" in capsys.readouterr().err


@pytest.mark.usefixtures("through_main")
def test_docs_through_the_entry_point_regenerates_the_checked_in_file(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["config", "docs"]) == 0
    checked_in = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
    assert capsys.readouterr().out == checked_in.read_text(encoding="utf-8")


@pytest.mark.usefixtures("through_main")
@pytest.mark.parametrize("argv", [["config", "--help"], ["config", "docs", "--help"], ["config", "validate", "--help"]])
def test_help_everywhere(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli_main.main(argv)
    assert info.value.code == 0
    assert "usage: tierlog config" in capsys.readouterr().out


@pytest.mark.usefixtures("through_main")
def test_config_needs_an_action(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli_main.main(["config"])
    assert info.value.code == 2
    assert "ACTION" in capsys.readouterr().err


def test_validate_reports_what_is_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "server.properties"
    path.write_text(f"log.dirs={tmp_path / 'data'}\nlog.dir=/ignored\nlog.retention.hours=24\n"
                    "rsm.config.dir=/remote\n", encoding="utf-8")
    assert run(["config", "validate", "--config", str(path), "--override", "log.retention.ms=5000"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out == (
        f"configuration is valid: {path} with 1 override\n"
        "keys set:\n"
        f"  log.dir = /ignored\n"
        f"  log.dirs = {tmp_path / 'data'}\n"
        "  log.retention.hours = 24\n"
        "  log.retention.ms = 5000\n"
        "topic defaults they set:\n"
        "  retention.ms = 5000 (from log.retention.ms)\n"
        "plugin properties passed through unchecked: rsm.config.dir\n"
    )
    assert not (tmp_path / "data").exists()


def test_validate_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["config", "validate"]) == 0
    assert capsys.readouterr().out == "configuration is valid: the defaults\n"


@pytest.mark.usefixtures("through_main")
@pytest.mark.parametrize(
    ("file_text", "overrides", "expected"),
    [
        ("", ["log.retention.hourz=1"], "log.retention.hourz: unknown config key; did you mean log.retention.hours? "
                                        "(from --override)"),
        ("node.id=one\n", [], "node.id: expected an integer, got 'one'; valid values: [0,...] (from {path}:1)"),
        ("\nlog.segment.bytes=13\n", [], "log.segment.bytes: value 13 is below the minimum 14 (from {path}:2)"),
        ("node.id=1\n", ["broker.id=2"], "broker.id: value 2 conflicts with node.id 1; broker.id is the old name "
                                         "of node.id: set only node.id, or both to the same value (from --override)"),
        ("node.id=1\nnot a property\n", [], "{path}:2: expected KEY=VALUE, got 'not a property'"),
    ],
)
def test_validate_refuses_with_one_line_and_exit_code_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], file_text: str, overrides: list[str],
        expected: str) -> None:
    path = tmp_path / "server.properties"
    path.write_text(file_text, encoding="utf-8")
    argv = ["config", "validate", "--config", str(path)]
    for item in overrides:
        argv += ["--override", item]
    assert cli_main.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"tierlog: invalid configuration: {expected.format(path=path)}\n"


def test_validate_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.properties"
    assert run(["config", "validate", "--config", str(missing)]) == 2
    assert capsys.readouterr().err == f"tierlog: cannot read {missing}: No such file or directory\n"
