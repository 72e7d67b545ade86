"""The root error type and the Kafka error codes that errors carry across layers.

Every error tierlog raises derives from :class:`TierlogError`. Errors that map onto a Kafka
protocol error carry that code, so the broker can answer with it without a translation table.
"""

from __future__ import annotations

from typing import ClassVar


class TierlogError(Exception):
    """Root of every error raised by tierlog."""

    #: Kafka protocol error code; -1 is UNKNOWN_SERVER_ERROR.
    error_code: ClassVar[int] = -1


class ConfigError(TierlogError):
    """An invalid configuration value; the message names the key and what is allowed."""

    error_code = 40  # INVALID_CONFIG

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class CorruptRecordError(TierlogError):
    error_code = 2  # CORRUPT_MESSAGE


class InvalidRecordError(TierlogError):
    error_code = 87  # INVALID_RECORD


class InvalidTimestampError(TierlogError):
    error_code = 32  # INVALID_TIMESTAMP


class RecordTooLargeError(TierlogError):
    error_code = 10  # MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(TierlogError):
    error_code = 18  # RECORD_LIST_TOO_LARGE


class UnsupportedCompressionTypeError(TierlogError):
    error_code = 76  # UNSUPPORTED_COMPRESSION_TYPE


class OffsetOutOfRangeError(TierlogError):
    error_code = 1  # OFFSET_OUT_OF_RANGE


class UnknownTopicOrPartitionError(TierlogError):
    error_code = 3  # UNKNOWN_TOPIC_OR_PARTITION


class OutOfOrderSequenceError(TierlogError):
    error_code = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(TierlogError):
    error_code = 47  # INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(TierlogError):
    error_code = 48  # INVALID_TXN_STATE


class TransactionCoordinatorFencedError(TierlogError):
    error_code = 52  # TRANSACTION_COORDINATOR_FENCED


class PolicyViolationError(TierlogError):
    error_code = 44  # POLICY_VIOLATION


class KafkaStorageError(TierlogError):
    """An I/O failure on a log directory."""

    error_code = 56  # KAFKA_STORAGE_ERROR


class CorruptIndexError(TierlogError):
    """An offset, time or transaction index failed its sanity check."""


class InvalidOffsetError(TierlogError):
    """An index append out of order (Kafka's InvalidOffsetException)."""


class IndexOffsetOverflowError(TierlogError):
    """An offset that cannot be stored relative to a segment's base offset."""


class CorruptSnapshotError(TierlogError):
    """A producer or metadata snapshot that fails to parse or fails its CRC."""
