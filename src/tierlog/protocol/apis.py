"""The APIs tierlog implements, the versions it advertises, and their kio message types.

This table is the only place versions are decided: the codec refuses what is not in it and the
ApiVersions response is generated from it, so the broker advertises exactly what it parses.

How the ranges were chosen (clients negotiate the highest version both sides support, so the
maximum decides what clients send and the minimum decides which old clients can connect):

* Minimum = the oldest version kio has a schema for. kio generates its schemas from Kafka 4.x, whose
  baseline (KIP-896) removed the versions no client released after Kafka 2.1 sends. Every version
  the installed clients can pick is at or above it: aiokafka 0.14 tops out at Produce 7, Fetch 11,
  ListOffsets 3, Metadata 5, OffsetCommit 3, OffsetFetch 3, CreateTopics 3, DeleteTopics 3,
  DescribeConfigs 2 (all >= the minimums), kafka-python 3.0 negotiates (capped at Produce 9,
  Fetch 12, JoinGroup 7, SyncGroup 5, OffsetCommit 8, OffsetFetch 8), kafka-python 2.0 hard-codes
  Metadata 1, JoinGroup 2, OffsetCommit 2, OffsetFetch 1, ListOffsets 1 -- all parseable.
* Maximum = the newest version kio has a schema for, which for every API here equals what Kafka
  4.3 advertises -- except InitProducerId, whose v6 (KIP-939 two-phase commit) is still unstable in
  Kafka and is not advertised by it, so tierlog stops at v5.
* Produce is *advertised* from v0 but parsed from v3 (v3 is the first with record batch v2), as
  Kafka 4.0 does (KAFKA-18659): librdkafka 2.x checks for compression support by looking for
  Produce v0-v2 in the ApiVersions response and silently stops compressing when they are missing
  (confluentinc/librdkafka#4956). Clients pick the highest common version, so none sends v0-v2.

Versions that carry topic ids instead of names, which the handlers must resolve: Produce 13,
Fetch 13+, OffsetCommit 10, OffsetFetch 10, DeleteTopics 6+ (optional). Metadata 10+ returns them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from types import MappingProxyType
from typing import Any, TypeAlias

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.errors import ErrorCode
from tierlog.protocol.errors import UnsupportedApiError, UnsupportedVersionError
from tierlog.protocol.unimplemented import KAFKA_BROKER_APIS, AnsweredApi

#: A kio request dataclass (``kio.schema.<api>.v<N>.request.<Api>Request``).
RequestBody: TypeAlias = RequestPayload
#: A kio response dataclass (``kio.schema.<api>.v<N>.response.<Api>Response``).
ResponseBody: TypeAlias = ResponsePayload


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75


@dataclass(frozen=True, slots=True)
class ApiSpec:
    api_key: ApiKey
    #: Kafka's name for the API, as printed by ``kafka-broker-api-versions``.
    name: str
    #: The versions the codec parses.
    min_version: int
    max_version: int
    #: The minimum written in the ApiVersions response, when it differs from ``min_version``.
    advertised_min_version: int | None = None

    @property
    def advertised_versions(self) -> tuple[int, int]:
        low = self.min_version if self.advertised_min_version is None else self.advertised_min_version
        return low, self.max_version

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_SPECS = (
    ApiSpec(ApiKey.PRODUCE, "Produce", 3, 13, advertised_min_version=0),
    ApiSpec(ApiKey.FETCH, "Fetch", 4, 18),
    ApiSpec(ApiKey.LIST_OFFSETS, "ListOffsets", 1, 11),
    ApiSpec(ApiKey.METADATA, "Metadata", 0, 13),
    ApiSpec(ApiKey.OFFSET_COMMIT, "OffsetCommit", 2, 10),
    ApiSpec(ApiKey.OFFSET_FETCH, "OffsetFetch", 1, 10),
    ApiSpec(ApiKey.FIND_COORDINATOR, "FindCoordinator", 0, 6),
    ApiSpec(ApiKey.JOIN_GROUP, "JoinGroup", 0, 9),
    ApiSpec(ApiKey.HEARTBEAT, "Heartbeat", 0, 4),
    ApiSpec(ApiKey.LEAVE_GROUP, "LeaveGroup", 0, 5),
    ApiSpec(ApiKey.SYNC_GROUP, "SyncGroup", 0, 5),
    ApiSpec(ApiKey.DESCRIBE_GROUPS, "DescribeGroups", 0, 6),
    ApiSpec(ApiKey.LIST_GROUPS, "ListGroups", 0, 5),
    ApiSpec(ApiKey.SASL_HANDSHAKE, "SaslHandshake", 0, 1),
    ApiSpec(ApiKey.API_VERSIONS, "ApiVersions", 0, 4),
    ApiSpec(ApiKey.CREATE_TOPICS, "CreateTopics", 2, 7),
    ApiSpec(ApiKey.DELETE_TOPICS, "DeleteTopics", 1, 6),
    ApiSpec(ApiKey.DELETE_RECORDS, "DeleteRecords", 0, 2),
    ApiSpec(ApiKey.INIT_PRODUCER_ID, "InitProducerId", 0, 5),
    ApiSpec(ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", 2, 4),
    ApiSpec(ApiKey.DESCRIBE_ACLS, "DescribeAcls", 1, 3),
    ApiSpec(ApiKey.CREATE_ACLS, "CreateAcls", 1, 3),
    ApiSpec(ApiKey.DELETE_ACLS, "DeleteAcls", 1, 3),
    ApiSpec(ApiKey.DESCRIBE_CONFIGS, "DescribeConfigs", 1, 4),
    ApiSpec(ApiKey.ALTER_CONFIGS, "AlterConfigs", 0, 2),
    ApiSpec(ApiKey.ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDirs", 1, 2),
    ApiSpec(ApiKey.DESCRIBE_LOG_DIRS, "DescribeLogDirs", 1, 5),
    ApiSpec(ApiKey.SASL_AUTHENTICATE, "SaslAuthenticate", 0, 2),
    ApiSpec(ApiKey.CREATE_PARTITIONS, "CreatePartitions", 0, 3),
    ApiSpec(ApiKey.DELETE_GROUPS, "DeleteGroups", 0, 2),
    ApiSpec(ApiKey.ELECT_LEADERS, "ElectLeaders", 0, 2),
    ApiSpec(ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", 0, 1),
    ApiSpec(ApiKey.OFFSET_DELETE, "OffsetDelete", 0, 0),
    ApiSpec(ApiKey.DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", 0, 1),
    ApiSpec(ApiKey.ALTER_CLIENT_QUOTAS, "AlterClientQuotas", 0, 1),
    ApiSpec(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentials", 0, 0),
    ApiSpec(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials", 0, 0),
    ApiSpec(ApiKey.UPDATE_FEATURES, "UpdateFeatures", 0, 2),
    ApiSpec(ApiKey.DESCRIBE_CLUSTER, "DescribeCluster", 0, 2),
    ApiSpec(ApiKey.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", 0, 5),
    ApiSpec(ApiKey.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", 0, 4),
    # EndTxn v5 (KIP-890 part 2: an epoch bump per transaction) is not implemented: v4 is the top.
    ApiSpec(ApiKey.END_TXN, "EndTxn", 0, 5),
    ApiSpec(ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommit", 0, 5),
    ApiSpec(ApiKey.WRITE_TXN_MARKERS, "WriteTxnMarkers", 1, 2),
    ApiSpec(ApiKey.DESCRIBE_PRODUCERS, "DescribeProducers", 0, 0),
    ApiSpec(ApiKey.DESCRIBE_TRANSACTIONS, "DescribeTransactions", 0, 0),
    ApiSpec(ApiKey.LIST_TRANSACTIONS, "ListTransactions", 0, 2),
    ApiSpec(ApiKey.CONSUMER_GROUP_HEARTBEAT, "ConsumerGroupHeartbeat", 0, 1),
    ApiSpec(ApiKey.CONSUMER_GROUP_DESCRIBE, "ConsumerGroupDescribe", 0, 1),
    ApiSpec(ApiKey.LIST_CONFIG_RESOURCES, "ListConfigResources", 0, 1),
    ApiSpec(ApiKey.DESCRIBE_TOPIC_PARTITIONS, "DescribeTopicPartitions", 0, 0),
)

SUPPORTED_APIS: Mapping[int, ApiSpec] = MappingProxyType({spec.api_key.value: spec for spec in _SPECS})

#: APIs Kafka's broker serves that tierlog answers with an error (not advertised in ApiVersions);
#: an implemented API overrides its entry.
ANSWERED_APIS: Mapping[int, AnsweredApi] = MappingProxyType(
    {a.api_key: a for a in KAFKA_BROKER_APIS if a.api_key not in SUPPORTED_APIS})


def parsed_api(api_key: int) -> ApiSpec | AnsweredApi | None:
    """The API whose requests the codec parses: implemented, or answered with an error."""
    return SUPPORTED_APIS.get(api_key) or ANSWERED_APIS.get(api_key)


def api_spec(api_key: int) -> ApiSpec | None:
    return SUPPORTED_APIS.get(api_key)


def is_supported(api_key: int, api_version: int) -> bool:
    spec = SUPPORTED_APIS.get(api_key)
    return spec is not None and spec.supports(api_version)


def _require(api_key: int, api_version: int) -> None:
    spec = parsed_api(api_key)
    if spec is None:
        raise UnsupportedApiError(api_key, api_version, None)
    if not spec.supports(api_version):
        raise UnsupportedVersionError(api_key, api_version, None)


@cache
def request_type(api_key: int, api_version: int) -> type[RequestBody]:
    """The kio request class of a supported API version (UnsupportedApi/VersionError otherwise)."""
    _require(api_key, api_version)
    try:
        return load_request_schema(api_key, api_version)
    except KioIndexError:  # pragma: no cover - the table is checked against kio by the tests
        raise UnsupportedVersionError(api_key, api_version, None) from None


@cache
def response_type(api_key: int, api_version: int) -> type[ResponseBody]:
    """The kio response class of a supported API version (UnsupportedApi/VersionError otherwise)."""
    _require(api_key, api_version)
    try:
        return load_response_schema(api_key, api_version)
    except KioIndexError:  # pragma: no cover - the table is checked against kio by the tests
        raise UnsupportedVersionError(api_key, api_version, None) from None


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible versions (KIP-482 tagged fields in the header), else 1."""
    return 2 if request_type(api_key, api_version).__flexible__ else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible versions, else 0 -- but always 0 for ApiVersions: a client that sent a version
    the broker does not know must still be able to read the error response's header."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if response_type(api_key, api_version).__flexible__ else 0


def api_versions_response(
    api_version: int,
    *,
    error_code: int = 0,
    throttle_time_ms: int = 0,
    supported_features: Mapping[str, tuple[int, int]] | None = None,
    finalized_features: Mapping[str, int] | None = None,
    finalized_features_epoch: int = -1,
) -> ResponseBody:
    """The ApiVersions response body listing every supported API with its advertised range, and
    (v3+, tagged fields) the broker's features, written as Kafka's ApiVersionsResponse.Builder writes
    them: a supported feature whose minimum is 0 is left out below v4 (older clients cannot read it,
    KAFKA-17492), a finalized feature at level 0 is left out, and a finalized level is its own
    minimum and maximum. ZkMigrationReady stays false: only a ZooKeeper-migrating controller sets it.
    """
    # Imported here because tierlog.protocol.build imports this module.
    from tierlog.protocol.build import build_response

    api_keys = [
        {"api_key": spec.api_key.value, "min_version": low, "max_version": high}
        for spec in _SPECS
        for low, high in (spec.advertised_versions,)
    ]
    values: dict[str, Any] = {"error_code": error_code, "api_keys": api_keys, "throttle_time": throttle_time_ms}
    if api_version >= 3 and error_code == ErrorCode.NONE:
        values["supported_features"] = [
            {"name": name, "min_version": low, "max_version": high}
            for name, (low, high) in sorted((supported_features or {}).items())
            if api_version >= 4 or low != 0
        ]
        values["finalized_features"] = [
            {"name": name, "min_version_level": level, "max_version_level": level}
            for name, level in sorted((finalized_features or {}).items())
            if level != 0
        ]
        values["finalized_features_epoch"] = finalized_features_epoch
        values["zk_migration_ready"] = False
    return build_response(ApiKey.API_VERSIONS, api_version, values)


def unsupported_api_versions_body() -> ApiVersionsResponseV0:
    """The v0 body answering an ApiVersions request of a version tierlog does not know.

    As in Kafka (KIP-511, ``ApiVersionsRequest.getErrorResponse``) it lists only ApiVersions itself,
    which is all a client reads from it: it retries with the highest version listed there.
    """
    from tierlog.protocol.build import build  # see api_versions_response

    low, high = SUPPORTED_APIS[ApiKey.API_VERSIONS].advertised_versions
    return build(
        ApiVersionsResponseV0,
        {
            "error_code": UnsupportedVersionError.error_code,
            "api_keys": [{"api_key": ApiKey.API_VERSIONS.value, "min_version": low, "max_version": high}],
        },
    )


# ApiVersionsRequest.java SOFTWARE_NAME_VERSION_PATTERN.
_SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def api_versions_request_is_valid(body: Any) -> bool:
    """Kafka answers INVALID_REQUEST (42) to an ApiVersions v3+ request whose client software name
    or version is empty or holds characters other than letters, digits, '-' and '.'."""
    if body.__version__ < 3:
        return True
    return all(
        isinstance(value, str) and _SOFTWARE_PATTERN.fullmatch(value) is not None
        for value in (body.client_software_name, body.client_software_version)
    )
