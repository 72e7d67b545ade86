"""The version table: consistent with kio, with Kafka's header rules, and usable by the Python
clients tierlog promises to serve."""

from __future__ import annotations

import inspect
from typing import Any

import aiokafka.protocol.admin
import aiokafka.protocol.commit
import aiokafka.protocol.coordination
import aiokafka.protocol.fetch
import aiokafka.protocol.group
import aiokafka.protocol.metadata
import aiokafka.protocol.offset
import aiokafka.protocol.produce
import aiokafka.protocol.transaction
import pytest
from aiokafka.protocol.api import Request as AiokafkaRequest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.broker_version_data import BrokerVersionData
from kio.schema.index import api_key_map, schema_name_map

from tierlog.protocol import (
    SUPPORTED_APIS,
    ApiKey,
    UnsupportedApiError,
    UnsupportedVersionError,
    api_versions_request_is_valid,
    api_versions_response,
    build_request,
    is_supported,
    request_header_version,
    request_type,
    response_header_version,
    response_type,
)

ADVERTISED = {key: spec.advertised_versions for key, spec in SUPPORTED_APIS.items()}


def test_the_table_is_the_brief() -> None:
    assert set(SUPPORTED_APIS) == {
        0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 21, 22, 23, 32, 33, 37, 42, 44, 47, 57, 60,
        24, 25, 26, 27, 28, 61, 65, 66,  # transactions (#17)
        68, 69,  # KIP-848 consumer groups
        75,  # DescribeTopicPartitions (the Java Admin's describeTopics)
        17, 36, 50, 51,  # SASL and SCRAM credentials (#19)
        29, 30, 31,  # DescribeAcls, CreateAcls, DeleteAcls (#19)
        48, 49,  # client quotas (#19)
        34, 35, 43,  # AlterReplicaLogDirs, DescribeLogDirs, ElectLeaders per item (#27)
        74,  # ListConfigResources: the groups with configs, for kafka-configs --entity-type groups (#27)
    }
    assert SUPPORTED_APIS[26].max_version == 5  # EndTxn v5: KIP-890 part 2 (transaction.version 2)
    assert 71 not in SUPPORTED_APIS and 72 not in SUPPORTED_APIS  # never the telemetry APIs
    assert SUPPORTED_APIS[0].min_version == 3  # record batch v2 only
    assert SUPPORTED_APIS[0].advertised_versions == (0, 13)  # KAFKA-18659, see apis.py
    assert SUPPORTED_APIS[1].max_version >= 13  # topic ids
    assert SUPPORTED_APIS[18].advertised_versions == (0, 4)
    assert all(ApiKey(key).value == key for key in SUPPORTED_APIS)


@pytest.mark.parametrize("api_key", sorted(SUPPORTED_APIS))
def test_every_parsed_version_exists_in_kio_and_the_range_is_kios(api_key: int) -> None:
    spec = SUPPORTED_APIS[api_key]
    kio_versions = sorted(schema_name_map[api_key_map[api_key]])
    assert spec.min_version == kio_versions[0]
    assert spec.max_version <= kio_versions[-1]
    for version in range(spec.min_version, spec.max_version + 1):
        request, response = request_type(api_key, version), response_type(api_key, version)
        assert (request.__api_key__, request.__version__) == (api_key, version)
        assert (response.__api_key__, response.__version__) == (api_key, version)


@pytest.mark.parametrize("api_key", sorted(SUPPORTED_APIS))
def test_header_versions_agree_with_kio(api_key: int) -> None:
    spec = SUPPORTED_APIS[api_key]
    for version in range(spec.min_version, spec.max_version + 1):
        request, response = request_type(api_key, version), response_type(api_key, version)
        assert request_header_version(api_key, version) == request.__header_schema__.__version__
        assert response_header_version(api_key, version) == response.__header_schema__.__version__
        if api_key == ApiKey.API_VERSIONS:
            assert response_header_version(api_key, version) == 0


def test_lookups_of_unsupported_apis_and_versions_raise_our_errors() -> None:
    assert is_supported(0, 3) and not is_supported(0, 2) and not is_supported(71, 0)
    with pytest.raises(UnsupportedApiError):
        request_type(71, 0)
    with pytest.raises(UnsupportedVersionError):
        response_type(0, 2)
    with pytest.raises(UnsupportedVersionError):
        request_type(22, 6)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_response_lists_exactly_the_table(version: int) -> None:
    body = api_versions_response(version, throttle_time_ms=7)
    listed = {entry.api_key: (entry.min_version, entry.max_version) for entry in body.api_keys}
    assert listed == ADVERTISED
    assert body.error_code == 0


def test_api_versions_features_are_written_as_kafka_writes_them() -> None:
    features = {"supported_features": {"metadata.version": (1, 21), "group.version": (0, 1)},
                "finalized_features": {"metadata.version": 20, "group.version": 0}, "finalized_features_epoch": 42}
    v4 = api_versions_response(4, **features)
    assert {(f.name, f.min_version, f.max_version) for f in v4.supported_features} == {
        ("metadata.version", 1, 21), ("group.version", 0, 1)}
    # A finalized level is its own min and max; level 0 is not finalized.
    assert [(f.name, f.min_version_level, f.max_version_level) for f in v4.finalized_features] == [
        ("metadata.version", 20, 20)]
    assert (v4.finalized_features_epoch, v4.zk_migration_ready) == (42, False)
    # Below v4 a supported feature with minimum 0 is left out (KAFKA-17492).
    v3 = api_versions_response(3, **features)
    assert [f.name for f in v3.supported_features] == ["metadata.version"]
    assert v3.finalized_features_epoch == 42
    # No features on an error, nor (no such fields) below v3.
    failed = api_versions_response(4, error_code=42, **features)
    assert failed.supported_features == () and failed.finalized_features_epoch == -1
    assert not hasattr(api_versions_response(2, **features), "supported_features")


def test_api_versions_request_validation_follows_kafka() -> None:
    assert api_versions_request_is_valid(build_request(18, 2, {}))
    valid = build_request(18, 3, {"client_software_name": "librdkafka", "client_software_version": "2.6.1"})
    assert api_versions_request_is_valid(valid)
    for name, version in [("", "1"), ("bad name", "1"), ("x", "-1"), ("x", "1.")]:
        body = build_request(18, 3, {"client_software_name": name, "client_software_version": version})
        assert not api_versions_request_is_valid(body), (name, version)


def _kafka_python_request_classes() -> list[type[ApiMessage]]:
    found = []
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and getattr(cls, "_json", None) and cls.is_request():
            found.append(cls)
    return found


def test_kafka_python_negotiates_a_parseable_version_of_every_api() -> None:
    # kafka-python 3.x picks min(its max, our max) and rejects the broker if that is below our min.
    versions = BrokerVersionData(api_versions=dict(ADVERTISED))
    classes = {cls.API_KEY: cls for cls in _kafka_python_request_classes()}
    # kafka-python has no classes of KIP-848's ConsumerGroupHeartbeat/Describe (68, 69).
    assert {k for k in SUPPORTED_APIS if k not in classes} == {68, 69}
    for api_key in SUPPORTED_APIS.keys() & classes.keys():
        chosen = versions.api_version(classes[api_key])
        assert is_supported(api_key, chosen), (api_key, chosen)
    # It infers a modern broker from the table, and so writes record batch v2.
    assert versions.broker_version >= (2, 1)


@pytest.mark.parametrize(
    ("api_key", "cap"),
    [(0, 9), (1, 12), (11, 7), (14, 5), (8, 8), (9, 8)],  # caps in kafka-python 3.0's own call sites
)
def test_kafka_python_capped_call_sites_stay_parseable(api_key: int, cap: int) -> None:
    assert is_supported(api_key, min(cap, SUPPORTED_APIS[api_key].max_version))


def _aiokafka_requests() -> list[type[Any]]:
    modules = [
        aiokafka.protocol.admin, aiokafka.protocol.commit, aiokafka.protocol.coordination,
        aiokafka.protocol.fetch, aiokafka.protocol.group, aiokafka.protocol.metadata,
        aiokafka.protocol.offset, aiokafka.protocol.produce, aiokafka.protocol.transaction,
    ]
    return [
        cls
        for module in modules
        for cls in vars(module).values()
        if inspect.isclass(cls) and issubclass(cls, AiokafkaRequest) and cls is not AiokafkaRequest
    ]


def test_aiokafka_finds_a_version_of_every_api_it_uses_here() -> None:
    # aiokafka picks its newest struct inside the broker's range and fails if there is none.
    covered = set()
    for cls in _aiokafka_requests():
        if cls.API_KEY not in SUPPORTED_APIS:
            continue
        low, high = ADVERTISED[cls.API_KEY]
        picks = [struct.API_VERSION for struct in cls._CLASSES if low <= struct.API_VERSION <= high]
        assert picks, f"aiokafka {cls.__name__} has no version in {low}..{high}"
        assert is_supported(cls.API_KEY, max(picks)), cls.__name__
        covered.add(cls.API_KEY)
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18} <= covered
