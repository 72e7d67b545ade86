"""The generated reference: complete, deterministic, and the checked-in copy is current."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tierlog.config import BROKER_DEF, TOPIC_DEF
from tierlog.config.docs import GROUP_TITLES, REGENERATE_COMMAND, render, render_markdown, render_text

REPO = Path(__file__).resolve().parents[3]
CHECKED_IN = REPO / "docs" / "configuration.md"


def test_checked_in_reference_is_current() -> None:
    expected = render_markdown()
    actual = CHECKED_IN.read_text(encoding="utf-8") if CHECKED_IN.exists() else ""
    if actual != expected:
        old, new = actual.splitlines(), expected.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        pytest.fail(f"docs/configuration.md is stale (first difference at line {first + 1}); "
                    f"regenerate it with: {REGENERATE_COMMAND}", pytrace=False)


def test_the_regenerate_command_is_the_documented_one() -> None:
    assert REGENERATE_COMMAND == "tierlog config docs > docs/configuration.md"
    assert REGENERATE_COMMAND in render_markdown()


@pytest.mark.integration
def test_output_does_not_depend_on_the_process() -> None:
    """Same bytes in a fresh interpreter with another hash seed (no set or dict order leaks in)."""
    code = "import sys; from tierlog.config.docs import render; sys.stdout.write(render('markdown'))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
                         check=True).stdout
    assert out == render_markdown() == render("markdown")


def _rows(markdown: str) -> dict[str, list[list[str]]]:
    """Table rows (cells split on unescaped pipes) under each ### heading."""
    sections: dict[str, list[list[str]]] = {}
    current = ""
    for line in markdown.splitlines():
        if line.startswith("### "):
            current = line[4:]
            sections[current] = []
        elif line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            sections[current].append(cells)
    return sections


def test_every_documented_key_is_one_row_in_its_scope_and_group() -> None:
    sections = _rows(render_markdown())
    for scope, definition in (("Broker", BROKER_DEF), ("Topic", TOPIC_DEF)):
        for key in definition.keys.values():
            found = [(title, row) for title, rows in sections.items() for row in rows
                     if title.startswith(f"{scope}:") and row[0] == f"`{key.name}`"]
            if key.internal:
                assert found == [], key.name
                continue
            assert len(found) == 1, key.name
            title, row = found[0]
            assert title == f"{scope}: {GROUP_TITLES[key.group]}"
            assert len(row) == 8
            assert row[1] == key.type.value
            assert row[3] == key.valid_values.replace("|", "\\|")
            assert row[4] == key.importance.value
            assert row[5] == ("yes" if key.dynamic else "no")
            assert row[7] == key.doc


def test_rows_show_defaults_synonyms_and_aliases() -> None:
    rows = {row[0]: row for rows in _rows(render_markdown()).values() for row in rows}
    retention = rows["`retention.ms`"]
    assert retention[2] == "`604800000` (7 days)"
    assert retention[6] == ("broker default: `log.retention.ms`, `log.retention.minutes` (in minutes), "
                            "`log.retention.hours` (in hours)")
    floor = rows["`log.retention.min.timestamp`"]
    assert "alias: `retention.min.timestamp`" in floor[6]
    assert rows["`log.retention.hours`"][6] == "default of topic key `retention.ms`"
    assert rows["`log.dirs`"][2] == "*unset*"
    assert rows["`segment.bytes`"][2] == "`1073741824` (1 GiB)"
    assert rows["`flush.ms`"][2] == "`9223372036854775807` (max long)"


def test_groups_come_in_the_documented_order() -> None:
    headings = [line[4:] for line in render_markdown().splitlines() if line.startswith("### ")]
    broker = [h.removeprefix("Broker: ") for h in headings if h.startswith("Broker: ")]
    titles = list(GROUP_TITLES.values())
    assert broker == sorted(broker, key=titles.index)
    assert broker[0] == "General"
    assert [h for h in headings if h.startswith("Topic: ")] == [
        "Topic: Log and retention", "Topic: Log compaction (the log cleaner)", "Topic: Tiered storage",
        "Topic: Apache Kafka's other keys (accepted, stored and described; tierlog does not act on them)"]


def test_plain_text_lists_every_key_with_its_facts() -> None:
    text = render_text()
    assert "|" not in text.replace("||", "")  # no table syntax
    for key in [*BROKER_DEF.keys.values(), *TOPIC_DEF.keys.values()]:
        if key.internal:
            continue
        assert re.search(rf"^{re.escape(key.name)}$", text, re.MULTILINE), key.name
    block = text.split("\nlog.retention.hours\n", 1)[1].split("\n\n", 1)[0]
    assert "    type: int    importance: high    dynamic: yes\n    default: 168\n" in block
    assert "valid values: [-1,...]" in block
    assert "default of topic key retention.ms" in block
    assert max(len(line) for line in text.splitlines()) <= 110


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="markdown or text"):
        render("html")
