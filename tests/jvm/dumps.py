"""Parse and compare the output of Kafka's DumpLogSegments and ``tierlog dump-log``.

Both print one ``key: value key: value ...`` line per batch, record or index entry, after a
``Dumping PATH`` line per file. The comparison is on values: every key both tools print for an
entry must carry the same value, and each file must have the same entries in the same order.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.jvm.kafka import DUMP_LOG, run_tool

_PAIR = re.compile(r"(?:^|\s)\|?\s*([A-Za-z]+): ")
_ENTRY_STARTS = ("baseOffset:", "| offset:", "offset:", "timestamp:", "producerId:")
#: What DumpLogSegments prints when a file is not what it should be (its own wording).
KAFKA_PROBLEMS = ("invalid bytes at the end of", "Found out of order", "are not found in", "Error at",
                  "Found timestamp mismatch", "Mismatches in", "Non-consecutive offsets in", "isvalid: false",
                  "isValid: false", "Exception")
#: Kafka spells an absent optional value Java's way.
_SAME = {"OptionalLong.empty": "none", "Optional.empty": "none"}

Entry = dict[str, str]


def parse_entry(line: str) -> Entry:
    keys = list(_PAIR.finditer(line))
    out: Entry = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        value = line[m.end():end].strip()
        out[m.group(1)] = _SAME.get(value, value)
    return out


def parse_dump(text: str) -> dict[str, list[Entry]]:
    """``{path: [entry, ...]}`` for each ``Dumping PATH`` section."""
    files: dict[str, list[Entry]] = {}
    current: list[Entry] | None = None
    for line in text.splitlines():
        if line.startswith("Dumping "):
            current = files.setdefault(line[len("Dumping "):].strip(), [])
        elif current is not None and line.startswith(_ENTRY_STARTS):
            current.append(parse_entry(line))
    return files


def _real_problems(stderr: str) -> str:
    """stderr without Kafka 4.3's own false alarm: with --deep-iteration it compares a segment's first
    offset with -1, so every segment not starting at offset 0 (its own too) is "Non-consecutive"."""
    lines = stderr.splitlines()
    keep: list[str] = []
    i = 0
    while i < len(lines):
        m = re.match(r"Non-consecutive offsets in (\S+)$", lines[i])
        follow = re.match(r"\s*-1 is followed by (\d+)$", lines[i + 1]) if m and i + 1 < len(lines) else None
        if m and follow and int(Path(m.group(1)).name.split(".")[0]) == int(follow.group(1)) and (
                i + 2 >= len(lines) or "is followed by" not in lines[i + 2]):
            i += 2
            continue
        keep.append(lines[i])
        i += 1
    return "\n".join(keep)


def kafka_dump(files: list[Path], *extra: str) -> str:
    proc = run_tool(DUMP_LOG, "--files", ",".join(map(str, files)), *extra)
    stderr = _real_problems(proc.stderr)
    found = [p for p in KAFKA_PROBLEMS if p in proc.stdout or p in stderr]
    assert not found, f"kafka-dump-log reports {found}:\n{proc.stdout[-3000:]}\n{stderr[-3000:]}"
    return proc.stdout


def tierlog_dump(files: list[Path], *extra: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "dump-log", "--strict", *map(str, files), *extra],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"tierlog dump-log exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout


def assert_same_values(kafka: dict[str, list[Entry]], tierlog: dict[str, list[Entry]], *,
                       ignore: frozenset[str] = frozenset()) -> int:
    """Every file has the same entries; values agree on every key both print. Returns entries compared."""
    assert sorted(kafka) == sorted(tierlog)
    compared = 0
    for path, k_entries in kafka.items():
        t_entries = tierlog[path]
        assert len(k_entries) == len(t_entries), f"{path}: Kafka shows {len(k_entries)} entries, tierlog {len(t_entries)}"
        for k, t in zip(k_entries, t_entries, strict=True):
            common = (k.keys() & t.keys()) - ignore
            missing = k.keys() - t.keys() - ignore
            assert not missing, f"{path}: tierlog does not print {sorted(missing)} of {k}"
            diff = {key: (k[key], t[key]) for key in common if k[key] != t[key]}
            assert not diff, f"{path}: Kafka and tierlog disagree (kafka, tierlog): {diff}"
            compared += 1
    return compared
