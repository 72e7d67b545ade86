"""The broker's authorization gate: one :class:`~tierlog.metadata.authorizer.Authorizer` per set of
ACLs in the metadata image (re-indexed only when the image's ACL mapping changes), asked by every
handler before it acts. Disabled (``authorizer.class.name`` empty) it allows everything and reports
every operation, as Kafka without an authorizer does."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from tierlog.config import BrokerConfig
from tierlog.metadata import MetadataImage
from tierlog.metadata.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    operations_bitfield,
)
from tierlog.metadata.authorizer import Authorizer, AuthorizerSettings
from tierlog.metadata.records import AccessControlEntryRecord

#: Kafka's audit logger name is kafka.authorizer.logger; tierlog's lives under its own package.
audit = logging.getLogger("tierlog.authorizer")


def acl_of(record: AccessControlEntryRecord) -> StandardAcl:
    return StandardAcl(ResourceType(record.resource_type), record.resource_name, PatternType(record.pattern_type),
                       record.principal, record.host, AclOperation(record.operation),
                       AclPermissionType(record.permission_type))


class AclGate:
    def __init__(self, settings: AuthorizerSettings | None, image: Callable[[], MetadataImage] | None = None) -> None:
        self.settings = settings
        self._image = image
        self._indexed: Mapping[bytes, AccessControlEntryRecord] | None = None
        self._authorizer: Authorizer | None = None

    @classmethod
    def from_config(cls, config: BrokerConfig, image: Callable[[], MetadataImage]) -> AclGate:
        if not config.get_str("authorizer.class.name"):
            return cls(None)
        settings = AuthorizerSettings(AuthorizerSettings.parse_super_users(config.get_str("super.users")),
                                      config.get_bool("allow.everyone.if.no.acl.found"))
        return cls(settings, image)

    @property
    def enabled(self) -> bool:
        return self.settings is not None

    def authorizer(self) -> Authorizer | None:
        if self.settings is None or self._image is None:
            return None
        acls = self._image().acls
        if acls is not self._indexed or self._authorizer is None:
            self._authorizer = Authorizer((acl_of(r) for r in acls.values()), self.settings)
            self._indexed = acls
        return self._authorizer

    def allowed(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType,
                name: str = CLUSTER_NAME, *, log_denied: bool = True) -> bool:
        authorizer = self.authorizer()
        if authorizer is None:
            return True
        ok = authorizer.authorize(principal, host, op, resource_type, name)
        if not ok and log_denied:
            audit.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:%s", principal,
                       op.name, host, resource_type.name, name)
        return ok

    def allowed_by_type(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType) -> bool:
        authorizer = self.authorizer()
        return authorizer is None or authorizer.authorize_by_resource_type(principal, host, op, resource_type)

    def operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The authorized-operations bitfield: every operation of the type without an authorizer."""
        authorizer = self.authorizer()
        if authorizer is None:
            return operations_bitfield(SUPPORTED_OPERATIONS[resource_type])
        if resource_type == ResourceType.CLUSTER and not authorizer.authorize(
                principal, host, AclOperation.DESCRIBE, resource_type, name):
            return 0  # Kafka reports no cluster operation to a principal that may not describe the cluster
        return authorizer.authorized_operations(principal, host, resource_type, name)


__all__ = ["AclGate", "acl_of"]
