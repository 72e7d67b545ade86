"""A partition whose files hold data of a record format tierlog does not read is refused, whichever
operation finds it: the one place that turns :class:`~tierlog.errors.UnsupportedRecordFormatError`
into a refusal of the partition.

The error is raised deep in a segment (a walk reaching an intact batch of magic > 2 with no v2 batch
after it, or a message set of magic 0/1) by whatever operation first reads those bytes: a fetch, a
segment roll or a retention pass rebuilding a time index, a ListOffsets by timestamp, the background
checker of seed 003, the cleaner. Each of them reaches the log through a public method of
:class:`~tierlog.storage.log.UnifiedLog` marked with :func:`refuses_partition`, so the partition is
refused as startup refuses it (one ERROR naming the file and the format, KAFKA_STORAGE_ERROR for every
later request, its files left as they are, no clean-shutdown marker for its dir) instead of failing
only that operation and going on appending after data it cannot read."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from tierlog.errors import UnsupportedRecordFormatError


class Refusable(Protocol):
    def refuse(self, reason: str) -> None:
        """Refuse the partition from now on, once, for ``reason``."""


P = ParamSpec("P")
R = TypeVar("R")
L = TypeVar("L", bound=Refusable)


def refuses_partition(fn: Callable[Concatenate[L, P], R]) -> Callable[Concatenate[L, P], R]:
    """``fn``, refusing its log's partition when it raises UnsupportedRecordFormatError (re-raised,
    so that operation still fails with KAFKA_STORAGE_ERROR). Nested marked methods refuse once."""

    @functools.wraps(fn)
    def wrapper(self: L, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(self, *args, **kwargs)
        except UnsupportedRecordFormatError as e:
            self.refuse(str(e))
            raise

    return wrapper
