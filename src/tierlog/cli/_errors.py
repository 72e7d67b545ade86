"""The two ways a client command fails on its own terms (no traceback): a :class:`CliError` is one
line and exit 1; a :class:`ClientConfigError` (a bad client property or file) one line and exit 2,
as an invalid config is everywhere in tierlog."""

from __future__ import annotations

ERROR_EXIT = 1
CONFIG_ERROR_EXIT = 2


class CliError(Exception):
    """A failure to report as one line (``error: <message>``) with exit code 1."""

    exit_code = ERROR_EXIT


class ClientConfigError(CliError):
    """A bad client property, value or file: one line naming the key, exit code 2."""

    exit_code = CONFIG_ERROR_EXIT
