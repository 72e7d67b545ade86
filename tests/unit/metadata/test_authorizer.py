"""The authorizer's decisions, table-driven from Kafka's StandardAuthorizer rules (StandardAuthorizerData,
AuthorizerTest/StandardAuthorizerTest cases and the ACL docs)."""

from __future__ import annotations

import pytest

from tierlog.metadata.acls import (
    SUPPORTED_OPERATIONS,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    operations_bitfield,
    validate_new_acl,
)
from tierlog.metadata.authorizer import Authorizer, AuthorizerSettings

Op = AclOperation
RT = ResourceType
LIT = PatternType.LITERAL
PRE = PatternType.PREFIXED
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
HOST = "10.0.0.1"


def acl(rt: ResourceType, name: str, pattern: PatternType, principal: str, op: AclOperation,
        perm: AclPermissionType = ALLOW, host: str = "*") -> StandardAcl:
    return StandardAcl(rt, name, pattern, principal, host, op, perm)


# (case, acls, principal, host, operation, resource type, resource name, allow.everyone.if.no.acl.found, expected)
CASES = [
    ("no acl denies by default", [], "User:a", HOST, Op.READ, RT.TOPIC, "t", False, False),
    ("no acl allows with allow.everyone", [], "User:a", HOST, Op.READ, RT.TOPIC, "t", True, True),
    ("literal allow", [acl(RT.TOPIC, "t", LIT, "User:a", Op.READ)], "User:a", HOST, Op.READ, RT.TOPIC, "t", False, True),
    ("literal allow is for that name only", [acl(RT.TOPIC, "t", LIT, "User:a", Op.READ)],
     "User:a", HOST, Op.READ, RT.TOPIC, "t2", False, False),
    ("other principal's acl: resource has acls, so allow.everyone does not apply",
     [acl(RT.TOPIC, "t", LIT, "User:b", Op.READ)], "User:a", HOST, Op.READ, RT.TOPIC, "t", True, False),
    ("acl on another resource leaves allow.everyone in force",
     [acl(RT.TOPIC, "u", LIT, "User:b", Op.READ)], "User:a", HOST, Op.READ, RT.TOPIC, "t", True, True),
    ("wildcard principal", [acl(RT.TOPIC, "t", LIT, "User:*", Op.WRITE)], "User:a", HOST, Op.WRITE, RT.TOPIC, "t",
     False, True),
    ("wildcard resource name", [acl(RT.TOPIC, "*", LIT, "User:a", Op.WRITE)], "User:a", HOST, Op.WRITE, RT.TOPIC,
     "anything", False, True),
    ("prefixed allow", [acl(RT.TOPIC, "app-", PRE, "User:a", Op.READ)], "User:a", HOST, Op.READ, RT.TOPIC, "app-1",
     False, True),
    ("prefixed equal to the name", [acl(RT.TOPIC, "app", PRE, "User:a", Op.READ)], "User:a", HOST, Op.READ, RT.TOPIC,
     "app", False, True),
    ("prefixed does not match a shorter name", [acl(RT.TOPIC, "app-", PRE, "User:a", Op.READ)], "User:a", HOST,
     Op.READ, RT.TOPIC, "app", False, False),
    ("literal whose name is a prefix does not match", [acl(RT.TOPIC, "app", LIT, "User:a", Op.READ)], "User:a",
     HOST, Op.READ, RT.TOPIC, "app-1", False, False),
    ("deny wins over allow", [acl(RT.TOPIC, "t", LIT, "User:a", Op.READ),
                              acl(RT.TOPIC, "t", LIT, "User:a", Op.READ, DENY)],
     "User:a", HOST, Op.READ, RT.TOPIC, "t", False, False),
    ("prefixed deny wins over literal allow", [acl(RT.TOPIC, "secret-", PRE, "User:*", Op.ALL, DENY),
                                               acl(RT.TOPIC, "secret-x", LIT, "User:a", Op.READ)],
     "User:a", HOST, Op.READ, RT.TOPIC, "secret-x", False, False),
    ("wildcard deny wins", [acl(RT.TOPIC, "*", LIT, "User:a", Op.READ, DENY), acl(RT.TOPIC, "t", LIT, "User:a", Op.READ)],
     "User:a", HOST, Op.READ, RT.TOPIC, "t", False, False),
    ("ALL allows any operation", [acl(RT.TOPIC, "t", LIT, "User:a", Op.ALL)], "User:a", HOST, Op.DELETE, RT.TOPIC,
     "t", False, True),
    ("ALL deny denies any operation", [acl(RT.TOPIC, "t", LIT, "User:a", Op.ALL, DENY),
                                       acl(RT.TOPIC, "t", LIT, "User:a", Op.DESCRIBE)],
     "User:a", HOST, Op.DESCRIBE, RT.TOPIC, "t", False, False),
    ("READ implies DESCRIBE", [acl(RT.TOPIC, "t", LIT, "User:a", Op.READ)], "User:a", HOST, Op.DESCRIBE, RT.TOPIC,
     "t", False, True),
    ("WRITE implies DESCRIBE", [acl(RT.TOPIC, "t", LIT, "User:a", Op.WRITE)], "User:a", HOST, Op.DESCRIBE, RT.TOPIC,
     "t", False, True),
    ("DELETE implies DESCRIBE", [acl(RT.TOPIC, "t", LIT, "User:a", Op.DELETE)], "User:a", HOST, Op.DESCRIBE,
     RT.TOPIC, "t", False, True),
    ("ALTER implies DESCRIBE", [acl(RT.TOPIC, "t", LIT, "User:a", Op.ALTER)], "User:a", HOST, Op.DESCRIBE, RT.TOPIC,
     "t", False, True),
    ("CREATE does not imply DESCRIBE", [acl(RT.TOPIC, "t", LIT, "User:a", Op.CREATE)], "User:a", HOST, Op.DESCRIBE,
     RT.TOPIC, "t", False, False),
    ("ALTER_CONFIGS implies DESCRIBE_CONFIGS", [acl(RT.TOPIC, "t", LIT, "User:a", Op.ALTER_CONFIGS)], "User:a", HOST,
     Op.DESCRIBE_CONFIGS, RT.TOPIC, "t", False, True),
    ("DESCRIBE does not imply READ", [acl(RT.TOPIC, "t", LIT, "User:a", Op.DESCRIBE)], "User:a", HOST, Op.READ,
     RT.TOPIC, "t", False, False),
    ("a DENY of READ does not deny DESCRIBE", [acl(RT.TOPIC, "t", LIT, "User:a", Op.READ, DENY),
                                               acl(RT.TOPIC, "t", LIT, "User:a", Op.WRITE)],
     "User:a", HOST, Op.DESCRIBE, RT.TOPIC, "t", False, True),
    ("host matches", [acl(RT.TOPIC, "t", LIT, "User:a", Op.READ, host=HOST)], "User:a", HOST, Op.READ, RT.TOPIC, "t",
     False, True),
    ("other host does not", [acl(RT.TOPIC, "t", LIT, "User:a", Op.READ, host="10.0.0.2")], "User:a", HOST, Op.READ,
     RT.TOPIC, "t", False, False),
    ("deny from one host only", [acl(RT.TOPIC, "t", LIT, "User:a", Op.READ),
                                 acl(RT.TOPIC, "t", LIT, "User:a", Op.READ, DENY, host="10.0.0.2")],
     "User:a", HOST, Op.READ, RT.TOPIC, "t", False, True),
    ("resource types are separate", [acl(RT.GROUP, "t", LIT, "User:a", Op.READ)], "User:a", HOST, Op.READ, RT.TOPIC,
     "t", False, False),
    ("group read", [acl(RT.GROUP, "g", LIT, "User:a", Op.READ)], "User:a", HOST, Op.READ, RT.GROUP, "g", False, True),
    ("cluster alter", [acl(RT.CLUSTER, "kafka-cluster", LIT, "User:a", Op.ALTER)], "User:a", HOST, Op.ALTER,
     RT.CLUSTER, "kafka-cluster", False, True),
    ("transactional id write", [acl(RT.TRANSACTIONAL_ID, "tx-", PRE, "User:a", Op.WRITE)], "User:a", HOST, Op.WRITE,
     RT.TRANSACTIONAL_ID, "tx-1", False, True),
    ("principal type matters", [acl(RT.TOPIC, "t", LIT, "Group:a", Op.READ)], "User:a", HOST, Op.READ, RT.TOPIC,
     "t", False, False),
]


@pytest.mark.parametrize(("acls", "principal", "host", "op", "rtype", "name", "allow_no_acl", "expected"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_authorize(acls: list[StandardAcl], principal: str, host: str, op: AclOperation, rtype: ResourceType,
                   name: str, allow_no_acl: bool, expected: bool) -> None:
    authorizer = Authorizer(acls, AuthorizerSettings(frozenset(), allow_no_acl))
    assert authorizer.authorize(principal, host, op, rtype, name) is expected


def test_super_user_is_allowed_despite_deny() -> None:
    authorizer = Authorizer([acl(RT.TOPIC, "*", LIT, "User:*", Op.ALL, DENY)],
                            AuthorizerSettings(AuthorizerSettings.parse_super_users("User:admin; User:ops"), False))
    assert authorizer.authorize("User:admin", HOST, Op.DELETE, RT.TOPIC, "t")
    assert authorizer.authorize("User:ops", HOST, Op.ALTER, RT.CLUSTER, "kafka-cluster")
    assert not authorizer.authorize("User:other", HOST, Op.READ, RT.TOPIC, "t")
    assert authorizer.authorize_by_resource_type("User:admin", HOST, Op.WRITE, RT.TOPIC)


# (case, acls, expected) for WRITE on any TOPIC by User:a (Kafka's AuthorizerTest.testAuthorizeByResourceType*)
BY_TYPE = [
    ("nothing", [], False),
    ("a literal allow", [acl(RT.TOPIC, "t", LIT, "User:a", Op.WRITE)], True),
    ("a wildcard allow", [acl(RT.TOPIC, "*", LIT, "User:*", Op.WRITE)], True),
    ("allow dominated by the same literal deny", [acl(RT.TOPIC, "t", LIT, "User:a", Op.WRITE),
                                                  acl(RT.TOPIC, "t", LIT, "User:a", Op.WRITE, DENY)], False),
    ("allow dominated by a prefix deny", [acl(RT.TOPIC, "abc", LIT, "User:a", Op.WRITE),
                                          acl(RT.TOPIC, "ab", PRE, "User:a", Op.WRITE, DENY)], False),
    ("a prefix deny elsewhere", [acl(RT.TOPIC, "abc", LIT, "User:a", Op.WRITE),
                                 acl(RT.TOPIC, "x", PRE, "User:a", Op.WRITE, DENY)], True),
    ("a wildcard deny", [acl(RT.TOPIC, "abc", LIT, "User:a", Op.WRITE),
                         acl(RT.TOPIC, "*", LIT, "User:a", Op.WRITE, DENY)], False),
    ("another operation", [acl(RT.TOPIC, "t", LIT, "User:a", Op.READ)], False),
    ("another principal", [acl(RT.TOPIC, "t", LIT, "User:b", Op.WRITE)], False),
    ("another resource type", [acl(RT.GROUP, "t", LIT, "User:a", Op.WRITE)], False),
]


@pytest.mark.parametrize(("acls", "expected"), [c[1:] for c in BY_TYPE], ids=[c[0] for c in BY_TYPE])
def test_authorize_by_resource_type(acls: list[StandardAcl], expected: bool) -> None:
    authorizer = Authorizer(acls, AuthorizerSettings())
    assert authorizer.authorize_by_resource_type("User:a", HOST, Op.WRITE, RT.TOPIC) is expected


def test_authorized_operations() -> None:
    authorizer = Authorizer([acl(RT.TOPIC, "t", LIT, "User:a", Op.READ)], AuthorizerSettings())
    assert authorizer.authorized_operations("User:a", HOST, RT.TOPIC, "t") == operations_bitfield([Op.READ,
                                                                                                    Op.DESCRIBE])
    assert authorizer.authorized_operations("User:b", HOST, RT.TOPIC, "t") == 0
    # Kafka without an authorizer reports every operation: 8 for a topic, 7 for the cluster.
    assert bin(operations_bitfield(SUPPORTED_OPERATIONS[RT.TOPIC])).count("1") == 8
    assert bin(operations_bitfield(SUPPORTED_OPERATIONS[RT.CLUSTER])).count("1") == 7


def test_validate_new_acl() -> None:
    good = acl(RT.TOPIC, "t", LIT, "User:a", Op.READ)
    assert validate_new_acl(good) is None
    assert validate_new_acl(acl(RT.TOPIC, "t", PatternType.MATCH, "User:a", Op.READ)) is not None
    assert validate_new_acl(acl(RT.ANY, "t", LIT, "User:a", Op.READ)) is not None
    assert validate_new_acl(acl(RT.TOPIC, "t", LIT, "User:a", Op.ANY)) is not None
    assert validate_new_acl(acl(RT.TOPIC, "t", LIT, "User:a", Op.READ, AclPermissionType.ANY)) is not None
    assert validate_new_acl(acl(RT.TOPIC, "", LIT, "User:a", Op.READ)) is not None
    assert validate_new_acl(acl(RT.CLUSTER, "c", LIT, "User:a", Op.ALTER)) is not None
    assert validate_new_acl(acl(RT.TOPIC, "t", LIT, "alice", Op.READ)) is not None


FILTER_ACLS = [
    acl(RT.TOPIC, "foo", LIT, "User:a", Op.READ),
    acl(RT.TOPIC, "*", LIT, "User:a", Op.WRITE),
    acl(RT.TOPIC, "fo", PRE, "User:b", Op.READ, DENY),
    acl(RT.GROUP, "foo", LIT, "User:a", Op.READ),
]


@pytest.mark.parametrize(("flt", "expected"), [
    (AclBindingFilter(), [0, 1, 2, 3]),
    (AclBindingFilter(RT.TOPIC), [0, 1, 2]),
    (AclBindingFilter(RT.TOPIC, "foo", PatternType.LITERAL), [0]),
    (AclBindingFilter(RT.TOPIC, "foo", PatternType.ANY), [0]),
    (AclBindingFilter(RT.TOPIC, "foo", PatternType.MATCH), [0, 1, 2]),
    (AclBindingFilter(RT.TOPIC, "fo", PatternType.PREFIXED), [2]),
    (AclBindingFilter(principal="User:b"), [2]),
    (AclBindingFilter(operation=Op.READ, permission=ALLOW), [0, 3]),
    (AclBindingFilter(host="10.9.9.9"), []),
])
def test_binding_filter(flt: AclBindingFilter, expected: list[int]) -> None:
    assert [i for i, a in enumerate(FILTER_ACLS) if flt.matches(a)] == expected
