"""What request handlers share: the broker's services, wired once by :mod:`tierlog.server.broker`.

Handlers are plain coroutines ``handler(ctx, request, client) -> Reply``; everything they touch is
reached from the :class:`BrokerContext`, so a unit test can build one around a temporary directory
and call a handler without sockets.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tierlog.clock import Clock
from tierlog.config import BrokerConfig
from tierlog.config.settings import setting
from tierlog.metadata import Controller, MetadataImage
from tierlog.metadata.acls import CLUSTER_NAME, AclOperation, ResourceType
from tierlog.protocol import ParsedRequest
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.connection_rate import ConnectionCreationRate, IpConnectionRates, ListenerConnectionRate
from tierlog.server.partitions import PartitionManager
from tierlog.server.quotas import QuotaManager
from tierlog.server.security.authz import AclGate
from tierlog.server.storage_io import StorageIO
from tierlog.server.transport import BoundListener
from tierlog.storage.cleaner.manager import LogCleaner
from tierlog.storage.log_manager import LogManager
from tierlog.tiered import RemoteLogManager

if TYPE_CHECKING:
    from tierlog.server.groups.coordinator import GroupCoordinator
    from tierlog.server.txn.coordinator import TransactionCoordinator

#: Kafka's "authorized operations not requested" marker (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
class ProducerIdManager:
    """Hands out producer ids from blocks the controller allocates in the metadata log, so an id is
    never given twice, across restarts too (Kafka's RPCProducerIdManager, minus the RPC)."""

    def __init__(self, controller: Controller, floor: int = 0) -> None:
        self._controller = controller
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0  # exclusive
        #: The lowest id the logs do not hold: ids below it may live on in producer state even if a
        #: damaged metadata log forgot handing them out.
        self._floor = floor

    def next_blocking(self) -> int:
        with self._lock:
            if self._next >= self._end:
                block = self._controller.allocate_producer_ids(at_least=self._floor)
                self._next, self._end = block.first_producer_id, block.first_producer_id + block.size
            pid = self._next
            self._next += 1
            return pid


@dataclass(frozen=True)
class RequestSettings:
    """The broker settings request handlers read (built by ``tierlog.server.settings``)."""

    auto_create_topics_enable: bool = setting("auto.create.topics.enable")
    #: ``log.durable.acks``: the lowest acks level answered only once the batches are fsynced.
    durable_acks: str = setting("log.durable.acks")


@dataclass
class BrokerContext:
    config: BrokerConfig
    node_id: int
    cluster_id: str
    clock: Clock
    controller: Controller
    log_manager: LogManager
    partitions: PartitionManager
    io: StorageIO
    producer_ids: ProducerIdManager
    listeners: list[BoundListener] = field(default_factory=list)
    groups: GroupCoordinator | None = None
    transactions: TransactionCoordinator | None = None
    #: The remote tier; None unless ``remote.log.storage.system.enable``.
    remote_log_manager: RemoteLogManager | None = None
    #: Kafka's log cleaner (compaction), None when ``log.cleaner.enable`` is false.
    log_cleaner: LogCleaner | None = None
    settings: RequestSettings = field(default_factory=RequestSettings)
    #: Client quotas' rates (server/quotas.py); None: nothing is throttled (unit tests' contexts).
    quotas: QuotaManager | None = None

    #: ip entities' connection_creation_rate (server/connection_rate.py), for the metrics; None in unit tests.
    connection_rates: IpConnectionRates | None = None
    #: max.connection.creation.rate (server/connection_rate.py), for the metrics; None in unit tests.
    broker_connection_rate: ConnectionCreationRate | None = None
    #: Each listener's own rate (listener.name.<listener>.max.connection.creation.rate), for the metrics.
    listener_connection_rates: list[ListenerConnectionRate] = field(default_factory=list)

    #: ACL checks (``authorizer.class.name``); the default allows everything.
    acl_gate: AclGate = field(default_factory=lambda: AclGate(None))
    #: Checks this broker's dynamic configs after a change would give its TLS listeners keystores that
    #: load and fit (raises ConfigError); None: no TLS listener to check (unit tests' contexts).
    tls_check: Callable[[Mapping[str, str]], None] | None = None

    def allowed(self, client: ClientInfo, op: AclOperation, resource_type: ResourceType = ResourceType.CLUSTER,
                name: str = CLUSTER_NAME, *, log_denied: bool = True) -> bool:
        """Whether the client's principal may do ``op`` on the resource (always, without an authorizer)."""
        return self.acl_gate.allowed(client.principal, client.host, op, resource_type, name, log_denied=log_denied)

    def allowed_by_type(self, client: ClientInfo, op: AclOperation, resource_type: ResourceType) -> bool:
        return self.acl_gate.allowed_by_type(client.principal, client.host, op, resource_type)

    def authorized_operations(self, client: ClientInfo, resource_type: ResourceType,
                              name: str = CLUSTER_NAME) -> int:
        return self.acl_gate.operations(client.principal, client.host, resource_type, name)

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def endpoint(self, client: ClientInfo | None = None) -> tuple[str, int]:
        """This broker's address as advertised on the listener the client came in on."""
        if not self.listeners:
            return "127.0.0.1", 9092
        if client is not None:
            for bound in self.listeners:
                if bound.spec.name == client.listener:
                    return bound.advertised_host, bound.advertised_port
        first = self.listeners[0]
        return first.advertised_host, first.advertised_port


Handler = Callable[[BrokerContext, ParsedRequest, ClientInfo], Awaitable[Reply]]


def topic_uuid(topic_id: bytes | None) -> uuid.UUID | None:
    return None if topic_id is None else uuid.UUID(bytes=topic_id)


def uuid_bytes(value: Any) -> bytes | None:
    """A kio topic id (None for Kafka's zero Uuid) as the metadata image's 16 bytes."""
    return None if value is None else bytes(value.bytes)
