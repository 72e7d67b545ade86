"""Plain-text tables and JSON lines for the client commands."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any


def render(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded to their widest cell, two spaces apart; ``None`` shows as ``-``."""
    cells = [list(header)] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells) + "\n"


def write(text: str) -> None:
    """Write to stdout; a reader that went away (``| head``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def json_lines(objects: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(o, sort_keys=True) + "\n" for o in objects)
