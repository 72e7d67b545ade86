"""The ``tierlog`` entry point imports only the module of the command it runs."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from tierlog.cli import main as cli_main


def test_each_command_is_registered_by_the_module_named_for_it() -> None:
    registered: dict[str, str] = {}
    for name in cli_main._SUBCOMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).register(sub)
        registered.update(dict.fromkeys(sub.choices, name))
    assert registered == cli_main._COMMAND_MODULES


@pytest.mark.parametrize(("argv", "command"), [
    (["topics", "list"], "topics"),
    (["--log-level", "DEBUG", "serve", "--override", "a=b"], "serve"),
    (["--log-format", "json", "consume", "t"], "consume"),
    (["--log-level=DEBUG", "dump-log", "x.log"], "dump-log"),
    (["--help"], None),
    (["-h", "topics"], None),
    ([], None),
])
def test_command_of(argv: list[str], command: str | None) -> None:
    assert cli_main.command_of(argv) == command


def test_one_command_parses_as_with_every_command() -> None:
    argv = ["--log-level", "WARNING", "topics", "create", "orders", "--partitions", "3"]
    assert vars(cli_main.build_parser("topics").parse_args(argv)) == vars(cli_main.build_parser().parse_args(argv))


def test_a_client_command_does_not_import_the_storage_layer() -> None:
    code = ("import sys; from tierlog.cli import main as m; m.build_parser(m.command_of(['topics', 'list'])); "
            "print('numba' in sys.modules, 'tierlog.storage' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_a_mistyped_command_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli_main.main(["topic", "list"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'topic'" in err and "'topics'" in err and "'serve'" in err
