"""The root error type and the Kafka error codes that errors carry across layers.

Every error tierlog raises derives from :class:`TierlogError`. Errors that map onto a Kafka
protocol error carry that code, so the broker can answer with it without a translation table.

:class:`ErrorCode` is the one place Kafka's error codes are written down. It lives here, in the
lowest layer, rather than re-exporting kio's enum, so every layer can name a code without importing
the wire library; tests/unit/test_error_codes.py checks it against kio's ``ErrorCode`` member by
member. Names are Kafka's ``Errors`` names.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class ErrorCode(IntEnum):
    """Kafka's protocol error codes (``org.apache.kafka.common.protocol.Errors``)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133


def error_code_of(e: BaseException) -> ErrorCode:
    """The Kafka error code an exception answers with: its own for a :class:`TierlogError`,
    UNKNOWN_SERVER_ERROR for anything else (a bug; disk errors are mapped to KafkaStorageError at
    the storage boundary, see :mod:`tierlog.storage.io_errors`)."""
    if isinstance(e, TierlogError):
        return ErrorCode(e.error_code)
    return ErrorCode.UNKNOWN_SERVER_ERROR


class TierlogError(Exception):
    """Root of every error raised by tierlog."""

    #: The Kafka error code the broker answers with.
    error_code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR


class ConfigError(TierlogError):
    """An invalid configuration value; the message names the key and what is allowed."""

    error_code = ErrorCode.INVALID_CONFIG

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class CorruptRecordError(TierlogError):
    error_code = ErrorCode.CORRUPT_MESSAGE


class _RecordErrors:
    """The records of a produced batch a check refused: (index in the batch, message) each, as Kafka's
    ProduceResponse v8+ carries them (KIP-467 ``record_errors``); empty when the batch as a whole failed."""

    record_errors: tuple[tuple[int, str], ...] = ()


class InvalidRecordError(_RecordErrors, TierlogError):
    error_code = ErrorCode.INVALID_RECORD

    def __init__(self, message: str = "", record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class InvalidTimestampError(_RecordErrors, TierlogError):
    error_code = ErrorCode.INVALID_TIMESTAMP

    def __init__(self, message: str = "", record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = record_errors


def record_errors_of(e: BaseException) -> tuple[tuple[int, str], ...]:
    """The per-record errors an exception carries (KIP-467), none for any other exception."""
    return e.record_errors if isinstance(e, _RecordErrors) else ()


class RecordTooLargeError(TierlogError):
    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(TierlogError):
    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class UnsupportedCompressionTypeError(TierlogError):
    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class OffsetOutOfRangeError(TierlogError):
    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class UnknownTopicOrPartitionError(TierlogError):
    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class OutOfOrderSequenceError(TierlogError):
    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(TierlogError):
    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(TierlogError):
    error_code = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(TierlogError):
    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class PolicyViolationError(TierlogError):
    error_code = ErrorCode.POLICY_VIOLATION


class KafkaStorageError(TierlogError):
    """An I/O failure on a log directory."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class UnsupportedRecordFormatError(KafkaStorageError):
    """A partition's files hold data in a format tierlog does not read (a message set of magic 0 or 1,
    or a batch newer than v2): the partition is refused -- not loaded, not served, its bytes left as
    they are -- rather than truncated as torn data or served up to a mark of damage."""


class CorruptIndexError(TierlogError):
    """An offset, time or transaction index failed its sanity check."""


class InvalidOffsetError(TierlogError):
    """An index append out of order (Kafka's InvalidOffsetException)."""


class IndexOffsetOverflowError(TierlogError):
    """An offset that cannot be stored relative to a segment's base offset."""


class CorruptSnapshotError(TierlogError):
    """A producer or metadata snapshot that fails to parse or fails its CRC."""


# -- protocol errors the layers below the protocol raise too ----------------------------------------


class ProtocolError(TierlogError):
    """Root of every error raised by :mod:`tierlog.protocol`."""

    error_code = ErrorCode.INVALID_REQUEST


class RequestError(ProtocolError):
    """A request that cannot be served; carries what could be read of its header.

    ``correlation_id`` is None only when the frame was too short to hold one.
    """

    def __init__(
        self,
        message: str,
        *,
        correlation_id: int | None,
        api_key: int | None = None,
        api_version: int | None = None,
    ) -> None:
        super().__init__(message)
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version


class UnsupportedVersionError(RequestError):
    """A known API (or a metadata record type) at a version tierlog does not parse.

    The one UNSUPPORTED_VERSION error: the metadata layer raises it too, for a metadata record newer
    than this broker reads (``api_key`` is then the record's apiKey), with its own ``message``."""

    error_code = ErrorCode.UNSUPPORTED_VERSION

    def __init__(self, api_key: int, api_version: int, correlation_id: int | None, *,
                 message: str | None = None) -> None:
        super().__init__(
            message or f"unsupported version {api_version} of API key {api_key}",
            correlation_id=correlation_id,
            api_key=api_key,
            api_version=api_version,
        )
