"""The ACL decision with Kafka's StandardAuthorizer rules, indexed once per set of ACLs.

The rules (StandardAuthorizerData, KIP-11, KIP-290):

* a super user (``super.users``) may do anything, whatever the ACLs say;
* the ACLs that apply to a resource are the LITERAL ones of its exact name, the LITERAL ones named
  ``*``, and the PREFIXED ones whose name the resource name starts with;
* of those, an ACL counts when its principal is the client's or ``User:*``, its host is the client's
  address or ``*``, and its operation is the one asked, or ALL -- or, for an ALLOW ACL only, one that
  implies it (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS);
* any DENY that counts wins; otherwise any ALLOW that counts allows;
* when no ACL at all applies to the resource (whoever it names), ``allow.everyone.if.no.acl.found``
  decides; when some apply but none counts, the answer is no.

Pure and immutable: the broker builds one :class:`Authorizer` per metadata image whose ACLs changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tierlog.metadata.acls import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)

_IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                               AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})
#: The name Kafka's authorizeByResourceType asks about first, so super users and
#: allow.everyone.if.no.acl.found decide before the ACL patterns are looked at.
_HARDCODED_NAME = "hardcode"


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    #: Principals (``User:name``) allowed everything.
    super_users: frozenset[str] = frozenset()
    #: What a resource no ACL applies to answers.
    allow_everyone_if_no_acl_found: bool = False

    @staticmethod
    def parse_super_users(value: str) -> frozenset[str]:
        """Kafka's ``super.users``: principals separated by semicolons."""
        return frozenset(p.strip() for p in value.split(";") if p.strip())


def _counts(acl: StandardAcl, principal: str, host: str, op: AclOperation) -> bool:
    """Whether ``acl`` applies to this principal, host and operation (its resource already matched)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return False
    if acl.host != WILDCARD and acl.host != host:
        return False
    if acl.operation == AclOperation.ALL or acl.operation == op:
        return True
    if acl.permission != AclPermissionType.ALLOW:
        return False  # a DENY of READ does not deny DESCRIBE
    if op == AclOperation.DESCRIBE:
        return acl.operation in _IMPLIES_DESCRIBE
    if op == AclOperation.DESCRIBE_CONFIGS:
        return acl.operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


class _TypeIndex:
    """The ACLs of one resource type: LITERAL by name (``*`` included), PREFIXED by prefix, and the
    lengths of the prefixes present so a lookup tries only those."""

    __slots__ = ("literal", "prefix_lengths", "prefixed")

    def __init__(self) -> None:
        self.literal: dict[str, list[StandardAcl]] = {}
        self.prefixed: dict[str, list[StandardAcl]] = {}
        self.prefix_lengths: tuple[int, ...] = ()

    def applicable(self, name: str) -> Iterable[StandardAcl]:
        yield from self.literal.get(name, ())
        if name != WILDCARD:
            yield from self.literal.get(WILDCARD, ())
        n = len(name)
        for length in self.prefix_lengths:
            if length > n:
                break
            yield from self.prefixed.get(name[:length], ())


class Authorizer:
    """Answers "may principal P do operation O on resource R from host H" for one set of ACLs."""

    def __init__(self, acls: Iterable[StandardAcl], settings: AuthorizerSettings) -> None:
        self.settings = settings
        self._by_type: dict[ResourceType, _TypeIndex] = {}
        self.acl_count = 0
        for acl in acls:
            index = self._by_type.get(acl.resource_type)
            if index is None:
                index = self._by_type[acl.resource_type] = _TypeIndex()
            table = index.literal if acl.pattern_type == PatternType.LITERAL else index.prefixed
            table.setdefault(acl.resource_name, []).append(acl)
            self.acl_count += 1
        for index in self._by_type.values():
            index.prefix_lengths = tuple(sorted({len(p) for p in index.prefixed}))
        self._all = [acl for index in self._by_type.values()
                     for table in (index.literal, index.prefixed) for acls_ in table.values() for acl in acls_]

    def is_super_user(self, principal: str) -> bool:
        return principal in self.settings.super_users

    def authorize(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.settings.super_users:
            return True
        index = self._by_type.get(resource_type)
        if index is None:
            return self.settings.allow_everyone_if_no_acl_found
        any_applies = False
        allowed = False
        for acl in index.applicable(name):
            any_applies = True
            if _counts(acl, principal, host, op):
                if acl.permission == AclPermissionType.DENY:
                    return False
                allowed = True
        if allowed:
            return True
        return not any_applies and self.settings.allow_everyone_if_no_acl_found

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bitfield: the resource type's operations this principal may do."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << int(op)
        return bits

    def authorize_by_resource_type(self, principal: str, host: str, op: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether the principal may do ``op`` on at least one resource of the type (Kafka's
        Authorizer.authorizeByResourceType: an ALLOW not dominated by a DENY of the same name or of a
        prefix of it; a DENY of ``*`` denies all)."""
        if self.authorize(principal, host, op, resource_type, _HARDCODED_NAME):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[StandardAcl] = []
        for acl in self._all:
            if acl.resource_type != resource_type:
                continue
            if acl.host != WILDCARD and acl.host != host:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != op and acl.operation != AclOperation.ALL:
                continue
            if acl.permission == AclPermissionType.DENY:
                if acl.pattern_type == PatternType.LITERAL:
                    if acl.resource_name == WILDCARD:
                        return False
                    deny_literal.add(acl.resource_name)
                else:
                    deny_prefixed.add(acl.resource_name)
            elif acl.permission == AclPermissionType.ALLOW:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    return True
                allow.append(acl)
        for acl in allow:
            if acl.pattern_type == PatternType.LITERAL and acl.resource_name in deny_literal:
                continue
            name = acl.resource_name
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False


__all__ = ["Authorizer", "AuthorizerSettings"]
