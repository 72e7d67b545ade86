"""How the ``tierlog`` command writes its log: text lines (the default) or JSON lines.

Significant events are logged as ``event key=value key=value`` (``segment rolled topic=t
partition=0 base_offset=120``). The JSON format keeps the message and also splits it into an
``event`` field and one field per key, so a log pipeline needs no parsing rules of its own.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
FORMATS = ("text", "json")

#: ``key=value`` after the start or a space; keys are lower_snake_case, values run to the next space.
_FIELD = re.compile(r"(?:^|(?<=\s))([a-z_][a-z0-9_]*)=(\S*)")
_RESERVED = frozenset({"ts", "level", "logger", "message", "event", "exception"})


def _typed(text: str) -> int | float | str:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def event_fields(message: str) -> tuple[str, dict[str, int | float | str]]:
    """``(event, fields)`` of a ``event key=value ...`` message; ``("", {})`` if it has no field."""
    first = _FIELD.search(message)
    if first is None:
        return "", {}
    fields: dict[str, int | float | str] = {}
    for key, raw in _FIELD.findall(message):
        if key not in _RESERVED:
            fields.setdefault(key, _typed(raw))
    return message[: first.start()].strip(), fields


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (UTC, ISO 8601 with ms), ``level``, ``logger``, ``message``,
    and for event lines ``event`` plus their fields."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        seconds = int(record.created)
        millis = int((record.created - seconds) * 1000)
        out: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        event, fields = event_fields(message)
        if event:
            out["event"] = event
        out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, separators=(",", ":"), default=str)


def configure_logging(level_name: str, log_format: str = "text") -> None:
    """Log to stderr at ``level_name`` in ``log_format`` (text or json)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=getattr(logging, str(level_name).upper(), logging.INFO), handlers=[handler])
