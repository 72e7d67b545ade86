"""Kafka's ACL model: resource types, pattern types, operations, permissions, and binding filters.

The numeric ids are Kafka's (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType`` in its clients), since they travel in CreateAcls/DescribeAcls/DeleteAcls and
are stored in ``AccessControlEntryRecord``. Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

#: The only name a CLUSTER resource has.
CLUSTER_NAME = "kafka-cluster"
#: A LITERAL resource name, or an ACL host, that matches any.
WILDCARD = "*"
#: The principal of an ACL that applies to every user.
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation

#: The operations each resource type has (Kafka 4.x's AclEntry.supportedOperations): what the
#: authorized-operations fields report, every one of them when no authorizer is configured.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                         Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                           Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


def operations_bitfield(ops: tuple[AclOperation, ...] | list[AclOperation]) -> int:
    """Kafka's 32-bit authorized-operations field: bit ``op`` set for each operation."""
    bits = 0
    for op in ops:
        bits |= 1 << int(op)
    return bits


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL: principal ``principal`` is ALLOWed or DENYed ``operation`` from ``host`` on the
    resources ``resource_type``/``resource_name`` matches under ``pattern_type``."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


def validate_new_acl(acl: StandardAcl) -> str | None:
    """Why Kafka refuses to create ``acl`` (INVALID_REQUEST), or None (AclControlManager.validateNewAcl
    and the CreateAcls handler's checks)."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {acl.permission.name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, colon, name = acl.principal.partition(":")
    if not colon or not kind or not name:
        return f"Could not parse principal from `{acl.principal}` (no colon is present separating the " \
               f"principal type from the principal name)"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs a DescribeAcls or DeleteAcls filter selects (Kafka's AclBindingFilter): ANY and None
    match everything; MATCH selects the ACLs that would apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def problem(self) -> str | None:
        """Why the filter is invalid (INVALID_REQUEST): an UNKNOWN field matches nothing by design."""
        for name, value in (("resourceType", self.resource_type), ("patternType", self.pattern_type),
                            ("operation", self.operation), ("permissionType", self.permission)):
            if int(value) == 0:
                return f"The {name} filter is UNKNOWN"
        return None

    def matches(self, acl: StandardAcl) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != acl.pattern_type:
            return False
        if self.resource_name is not None:
            if self.pattern_type in (PatternType.ANY, acl.pattern_type):
                if self.resource_name != acl.resource_name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:
                if acl.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif acl.pattern_type == PatternType.PREFIXED:
                if not self.resource_name.startswith(acl.resource_name):
                    return False
            else:
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission == AclPermissionType.ANY or self.permission == acl.permission


__all__ = [
    "CLUSTER_NAME",
    "SUPPORTED_OPERATIONS",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
    "StandardAcl",
    "operations_bitfield",
    "validate_new_acl",
]
