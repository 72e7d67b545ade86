"""Java ``.properties`` text: the one reader and writer, for ``server.properties`` and
``meta.properties`` alike.

The reader accepts what ``java.util.Properties.load`` accepts: natural lines ending in ``\\n``,
``\\r`` or ``\\r\\n``; leading whitespace (space, tab, form feed) ignored; ``#`` and ``!`` comment
lines; a key ended by the first unescaped ``=``, ``:`` or whitespace (``key=value``, ``key: value``,
``key value``); a trailing odd number of backslashes continues the line (the next line's leading
whitespace dropped); the escapes ``\\t \\n \\r \\f``, ``\\uXXXX``, and a backslash before any other
character standing for that character (``\\\\ \\= \\: \\ \\# \\!``). A malformed ``\\uXXXX`` is a
:class:`PropertiesError` (Java's IllegalArgumentException); callers turn it into their own error.

The writer writes what ``Properties.store(writer, "")`` writes (keys sorted, as JDK 18+ does).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")


class PropertiesError(ValueError):
    """A line Properties.load refuses (a malformed ``\\uXXXX``)."""

    def __init__(self, source: str, line_no: int, message: str) -> None:
        super().__init__(f"{source}:{line_no}: {message}")
        self.source = source
        self.line_no = line_no
        self.message = message


@dataclass(frozen=True, slots=True)
class PropertyEntry:
    """One key/value pair; ``line_no`` is the first natural line (1-based), ``line`` the logical line
    as written (continuations joined), ``separator`` is ``=``, ``:``, `` `` (whitespace) or ``""``
    (a key alone)."""

    key: str
    value: str
    line_no: int
    line: str
    separator: str


def _ends_with_continuation(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str, source: str, line_no: int) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        i += 1
        if i >= n:
            break  # a lone trailing backslash disappears, as in Properties.load
        ch = text[i]
        if ch == "u":
            digits = text[i + 1 : i + 5]
            if not _HEX4.fullmatch(digits):
                raise PropertiesError(source, line_no, "malformed \\uxxxx encoding")
            out.append(chr(int(digits, 16)))
            i += 5
            continue
        out.append(_ESCAPES.get(ch, ch))
        i += 1
    return "".join(out)


def read_property_entries(text: str, source: str = "properties") -> Iterator[PropertyEntry]:
    """Every entry of ``text`` in file order (a later one for the same key wins in a mapping)."""
    natural = _LINE_BREAK.split(text)
    i = 0
    while i < len(natural):
        line = natural[i].lstrip(_WS)
        line_no = i + 1
        i += 1
        if not line or line[0] in "#!":
            continue
        while _ends_with_continuation(line):
            line = line[:-1]
            if i >= len(natural):
                break
            line += natural[i].lstrip(_WS)
            i += 1
        j, n = 0, len(line)
        while j < n:
            if line[j] == "\\":
                j += 2
            elif line[j] in "=:" or line[j] in _WS:
                break
            else:
                j += 1
        j = min(j, n)
        key = line[:j]
        k = j
        while k < n and line[k] in _WS:
            k += 1
        separator = " " if k > j else ""
        if k < n and line[k] in "=:":
            separator = line[k]
            k += 1
            while k < n and line[k] in _WS:
                k += 1
        elif k == n:
            separator = ""
        yield PropertyEntry(_unescape(key, source, line_no), _unescape(line[k:], source, line_no), line_no,
                            line, separator)


def read_properties(text: str, source: str = "properties") -> dict[str, str]:
    """``Properties.load`` of ``text``: a later entry for a key wins."""
    return {e.key: e.value for e in read_property_entries(text, source)}


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _java_date(now_ms: int) -> str:
    """``java.util.Date.toString`` in UTC: ``EEE MMM dd HH:mm:ss zzz yyyy``, English names."""
    t = time.gmtime(now_ms // 1000)
    return f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} UTC {t.tm_year}"


def _escape(text: str, is_key: bool) -> str:
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch == " ":
            out.append("\\ " if is_key or i == 0 else " ")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ch in "=:#!\\":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, str], now_ms: int) -> str:
    """What ``Properties.store(writer, "")`` writes at ``now_ms``: an empty ``#`` comment line, a date
    comment line, then ``key=value`` lines, sorted by key as JDK 18+ writes them."""
    lines = ["#", "#" + _java_date(now_ms)]
    lines.extend(f"{_escape(k, True)}={_escape(props[k], False)}" for k in sorted(props))
    return "\n".join(lines) + "\n"
