"""Errors of the metadata layer that the root error module does not define yet, each with the Kafka
error code the broker answers with (the controller's validation errors map one to one onto the
CreateTopics / CreatePartitions / AlterConfigs / UpdateFeatures response codes)."""

from __future__ import annotations

from tierlog.errors import CorruptSnapshotError, ErrorCode, TierlogError, UnsupportedVersionError


class InvalidTopicError(TierlogError):
    error_code = ErrorCode.INVALID_TOPIC_EXCEPTION


class TopicExistsError(TierlogError):
    error_code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(TierlogError):
    error_code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(TierlogError):
    error_code = ErrorCode.INVALID_REPLICATION_FACTOR


class NotControllerError(TierlogError):
    """The controller is closed, or stopped itself after a failed write to the metadata log."""

    error_code = ErrorCode.NOT_CONTROLLER


class InvalidRequestError(TierlogError):
    error_code = ErrorCode.INVALID_REQUEST


class InvalidUpdateVersionError(TierlogError):
    error_code = ErrorCode.INVALID_UPDATE_VERSION


class MetadataReplayError(TierlogError):
    """A metadata record that cannot be applied to the image (a record for an unknown topic, an unknown
    apiKey or version): the log or snapshot was not written by a compatible controller."""


class InconsistentMetadataLogError(TierlogError):
    """The metadata log cannot be loaded: no usable snapshot covers its start offset."""


__all__ = [
    "CorruptSnapshotError",
    "InconsistentMetadataLogError",
    "InvalidPartitionsError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidTopicError",
    "InvalidUpdateVersionError",
    "MetadataReplayError",
    "NotControllerError",
    "TopicExistsError",
    "UnsupportedVersionError",
]
