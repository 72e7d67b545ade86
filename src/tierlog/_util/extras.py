"""Optional dependencies: the broker needs none of them; the Spark pipeline and the S3 backend each
come with an extra (``pip install 'tierlog[spark]'``, ``'tierlog[s3]'``). Code behind an extra
checks for it first, so a missing package is one line naming the extra, not a traceback."""

from __future__ import annotations

import importlib.util


class MissingExtraError(ImportError):
    """A package of an optional extra is not installed."""


def require_extra(extra: str, what: str, *modules: str) -> None:
    """Raise MissingExtraError unless every module in ``modules`` can be imported (checked without
    importing it)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtraError(f"{what} needs {', '.join(missing)}: install it with "
                                f"pip install 'tierlog[{extra}]'")
