"""The APIs Apache Kafka 4.x serves on a broker listener that tierlog does not implement, and the error
each is answered with.

Kafka answers every API its broker listener has -- without an authorizer DescribeAcls answers
SECURITY_DISABLED; with share or streams groups off their APIs answer UNSUPPORTED_VERSION (KafkaApis
sends ``request.getErrorResponse(...)``) -- and closes the connection only for an API key or version it
does not know, or one its broker listener does not serve (the controller's Raft and broker-registration
APIs; the telemetry APIs when no telemetry reporter is configured). A client that sends one of these
without checking ApiVersions first (Sarama's ClusterAdmin sends DescribeAcls) keeps its connection.

The versions are those of kio's schemas, which are Kafka 4.x's. An API that gains a real
implementation (an entry in :data:`tierlog.protocol.apis.SUPPORTED_APIS` and a handler) overrides its
entry here. The answer is built by :mod:`tierlog.protocol.error_answers`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.errors import ErrorCode

NO_AUTHORIZER = "No Authorizer is configured."


@dataclass(frozen=True, slots=True)
class AnsweredApi:
    api_key: int
    #: Kafka's name for the API.
    name: str
    min_version: int
    max_version: int
    error_code: ErrorCode
    error_message: str | None = None

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def _unsupported(api_key: int, name: str, low: int, high: int) -> AnsweredApi:
    return AnsweredApi(api_key, name, low, high, ErrorCode.UNSUPPORTED_VERSION,
                       f"tierlog does not implement {name}")


def _not_coordinator(api_key: int, name: str, low: int, high: int, verb: str) -> AnsweredApi:
    # ShareCoordinatorService's message for an operation whose shard this broker does not lead.
    return AnsweredApi(api_key, name, low, high, ErrorCode.NOT_COORDINATOR,
                       f"Unable to {verb}: This is not the correct coordinator.")


KAFKA_BROKER_APIS: tuple[AnsweredApi, ...] = (
    AnsweredApi(29, "DescribeAcls", 1, 3, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER),
    AnsweredApi(30, "CreateAcls", 1, 3, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER),
    AnsweredApi(31, "DeleteAcls", 1, 3, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER),
    # Kafka without delegation.token.secret.key: DELEGATION_TOKEN_AUTH_DISABLED.
    AnsweredApi(38, "CreateDelegationToken", 1, 3, ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED),
    AnsweredApi(39, "RenewDelegationToken", 1, 2, ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED),
    AnsweredApi(40, "ExpireDelegationToken", 1, 2, ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED),
    AnsweredApi(41, "DescribeDelegationToken", 1, 3, ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED),
    _unsupported(45, "AlterPartitionReassignments", 0, 1),
    _unsupported(46, "ListPartitionReassignments", 0, 0),
    _unsupported(48, "DescribeClientQuotas", 0, 1),
    _unsupported(55, "DescribeQuorum", 0, 2),
    _unsupported(64, "UnregisterBroker", 0, 0),
    _unsupported(76, "ShareGroupHeartbeat", 1, 1),
    _unsupported(77, "ShareGroupDescribe", 1, 1),
    _unsupported(78, "ShareFetch", 1, 2),
    _unsupported(79, "ShareAcknowledge", 1, 2),
    _unsupported(80, "AddRaftVoter", 0, 1),
    _unsupported(81, "RemoveRaftVoter", 0, 0),
    _unsupported(88, "StreamsGroupHeartbeat", 0, 0),
    _unsupported(89, "StreamsGroupDescribe", 0, 0),
    # The share coordinator's state APIs (KIP-932): Kafka's broker runs a share coordinator even with
    # share groups off, but without the __share_group_state topic it leads no shard of it, so each
    # partition of a request is answered NOT_COORDINATOR (after the CLUSTER_ACTION check that
    # server/handlers/share_state.py makes).
    _not_coordinator(83, "InitializeShareGroupState", 0, 0, "initialize share group state"),
    _not_coordinator(84, "ReadShareGroupState", 0, 0, "read share group state"),
    _not_coordinator(85, "WriteShareGroupState", 0, 1, "write share group state"),
    _not_coordinator(86, "DeleteShareGroupState", 0, 0, "delete share group state"),
    _not_coordinator(87, "ReadShareGroupStateSummary", 0, 1, "read share group state summary"),
    # With share groups off Kafka answers each group UNSUPPORTED_VERSION (KafkaApis).
    AnsweredApi(90, "DescribeShareGroupOffsets", 0, 1, ErrorCode.UNSUPPORTED_VERSION),
    _unsupported(91, "AlterShareGroupOffsets", 0, 0),
    _unsupported(92, "DeleteShareGroupOffsets", 0, 0),
)
