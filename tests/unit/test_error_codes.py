"""tierlog's one ErrorCode enum matches Kafka's codes (kio's enum, generated from Kafka's schema), and
every error type answers with a member of it."""

from __future__ import annotations

import importlib
import pkgutil

from kio.schema.errors import ErrorCode as KioErrorCode

import tierlog
from tierlog.errors import ErrorCode, KafkaStorageError, TierlogError, error_code_of
from tierlog.metadata.errors import UnsupportedVersionError as MetadataUnsupportedVersionError
from tierlog.protocol.errors import UnsupportedVersionError


def test_every_code_matches_kafkas() -> None:
    assert {m.name.lower(): m.value for m in ErrorCode} == {m.name: m.value for m in KioErrorCode}


def _all_subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _all_subclasses(sub)
    return found


def test_every_tierlog_error_carries_a_code_of_the_enum() -> None:
    for info in pkgutil.walk_packages(tierlog.__path__, "tierlog."):
        if not info.name.startswith(("tierlog.pipeline", "tierlog.testing")):
            importlib.import_module(info.name)
    subclasses = _all_subclasses(TierlogError)
    assert len(subclasses) > 20
    for cls in subclasses:
        assert isinstance(cls.error_code, ErrorCode), cls


def test_error_code_of() -> None:
    assert error_code_of(KafkaStorageError("disk")) == ErrorCode.KAFKA_STORAGE_ERROR == 56
    assert error_code_of(ValueError("bug")) == ErrorCode.UNKNOWN_SERVER_ERROR


def test_one_unsupported_version_error() -> None:
    assert MetadataUnsupportedVersionError is UnsupportedVersionError
    assert UnsupportedVersionError.error_code == ErrorCode.UNSUPPORTED_VERSION
