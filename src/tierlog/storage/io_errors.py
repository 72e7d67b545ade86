"""Disk errors mapped once, at the storage boundary: an ``OSError`` raised while a log appends,
reads or flushes leaves storage as :class:`~tierlog.errors.KafkaStorageError` (KAFKA_STORAGE_ERROR,
56), so the layers above answer it through the one exception → error-code mapping
(:func:`tierlog.errors.error_code_of`) and never special-case ``OSError``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from tierlog.errors import KafkaStorageError

P = ParamSpec("P")
R = TypeVar("R")


def disk_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Re-raise an ``OSError`` from ``fn`` as KafkaStorageError with the same message (the cause kept)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except OSError as e:
            raise KafkaStorageError(str(e)) from e

    return wrapper
