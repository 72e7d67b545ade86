"""The composition root: configuration in, a serving broker out.

Start order: the metadata controller first (it knows which topics exist and their configs), then the
log manager (loading every log with those configs), the log sync that keeps the two in step, the
background tasks, the group coordinator (which reads committed offsets back), and last the
listeners. Stop runs it backwards and ends with the log manager's clean shutdown (producer
snapshots, checkpoints, the clean-shutdown marker) so the next start is fast.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import signal
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tierlog._util.files import fsync_dir
from tierlog.clock import SYSTEM_CLOCK, Clock, monotonic_s
from tierlog.config import BrokerConfig
from tierlog.config.definition import Value
from tierlog.config.log_config import LogConfig
from tierlog.config.security_keys import LISTENER_PREFIX
from tierlog.errors import ConfigError, TierlogError
from tierlog.ids import uuid_to_base64
from tierlog.metadata import Controller, MetadataImage, metadata_log_dir
from tierlog.scheduler import ThreadScheduler
from tierlog.server.cleaner_config import CleanerReconfigurer, effective_cleaner_settings
from tierlog.server.connection import KafkaConnection
from tierlog.server.connection_rate import (
    ConnectionCreationRate,
    ConnectionRateGate,
    IpConnectionRates,
    ListenerConnectionRate,
)
from tierlog.server.console import Console
from tierlog.server.context import BrokerContext, ProducerIdManager
from tierlog.server.dispatcher import Dispatcher
from tierlog.server.groups.coordinator import GroupCoordinator
from tierlog.server.handlers import all_handlers
from tierlog.server.limits import (
    ConnectionQuotas,
    RequestMemoryPool,
    RequestSlots,
    parse_ip_overrides,
    raise_open_file_limit,
)
from tierlog.server.log_sync import LogSync, effective_topic_defaults, restore_lost_topics, topic_log_config
from tierlog.server.metrics import BrokerMetrics
from tierlog.server.partitions import PartitionManager
from tierlog.server.quotas import QuotaManager
from tierlog.server.remote_tier import create_remote_log_manager, guard_without_remote_tier, metadata_dir_of
from tierlog.server.security.authz import AclGate
from tierlog.server.security.listeners import ListenerSecurity
from tierlog.server.settings import (
    NetworkSettings,
    controller_settings,
    group_settings,
    network_settings,
    quota_window,
    request_settings,
    txn_settings,
)
from tierlog.server.storage_io import StorageIO
from tierlog.server.tier_sync import TierSync
from tierlog.server.transport import BoundListener, KafkaServer, parse_advertised_listeners, parse_listeners
from tierlog.server.txn.coordinator import CRASH_STEPS, TransactionCoordinator
from tierlog.storage.checkpoints import (
    META_PROPERTIES,
    MetaProperties,
    salvage_meta_properties,
    well_formed_cluster_id,
)
from tierlog.storage.cleaner.manager import LogCleaner
from tierlog.storage.dir_lock import DirLock
from tierlog.storage.log_manager import LogManager, LogManagerSettings
from tierlog.tiered import RemoteLogManager

log = logging.getLogger(__name__)


def _existing_cluster_id(log_dirs: tuple[Path, ...]) -> str | None:
    for d in log_dirs:
        try:
            meta = MetaProperties.read(d / META_PROPERTIES)
        except FileNotFoundError:
            continue
        except TierlogError:
            # Damaged: keep the cluster id if its line survived (the log manager rewrites the file).
            salvaged, _ = salvage_meta_properties(d / META_PROPERTIES)
            if salvaged:
                return salvaged
            continue
        if well_formed_cluster_id(meta.cluster_id):
            return meta.cluster_id
    return None


class _Connections:
    """Live connections, for the connection quotas, idle expiry and closing them all at shutdown."""

    def __init__(self, quotas: ConnectionQuotas) -> None:
        self.quotas = quotas
        self.live: set[KafkaConnection] = set()

    def opened(self, connection: KafkaConnection) -> bool:
        if self.quotas.admit(connection.client.host, connection.fd) is not None:
            return False
        self.live.add(connection)
        return True

    def closed(self, connection: KafkaConnection) -> None:
        if connection in self.live:
            self.live.discard(connection)
            self.quotas.release(connection.client.host)


def _connection_quotas(net: NetworkSettings, clock: Clock) -> ConnectionQuotas:
    try:
        overrides = parse_ip_overrides(net.max_connections_per_ip_overrides)
    except ValueError as e:
        raise ConfigError("max.connections.per.ip.overrides", str(e)) from None
    return ConnectionQuotas(net.max_connections, net.max_connections_per_ip, overrides, clock=clock)


def _dynamic_int(image: Callable[[], MetadataImage], node_id: int, key: str, static: int) -> Callable[[], int]:
    """The current value of a dynamic int broker key: per broker, else cluster-wide, else ``static``
    (the value was validated when it was altered)."""

    def current() -> int:
        value = image().effective_broker_config(node_id, key)
        try:
            return static if value is None else int(value)
        except ValueError:
            return static

    return current


def _listener_rate_limit(image: Callable[[], MetadataImage], config: BrokerConfig, listener: str,
                         broker_limit: Callable[[], int]) -> Callable[[], int]:
    """A listener's ``max.connection.creation.rate`` as Kafka reads it (the listener's configs with the
    prefixed keys overriding the others): its dynamic per-listener value (per broker, else
    cluster-wide), else its static one, else the broker-wide limit."""
    prefixed = f"{LISTENER_PREFIX}{listener.lower()}.max.connection.creation.rate"
    static = config.listener_override(listener, "max.connection.creation.rate")

    def current() -> int:
        value = image().effective_broker_config(config.node_id, prefixed)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                pass
        return int(static) if isinstance(static, int) else broker_limit()

    return current


class Broker:
    def __init__(self, config: BrokerConfig, log_settings: LogManagerSettings, *, clock: Clock = SYSTEM_CLOCK,
                 io_threads: int = 4) -> None:
        self.config = config
        self.clock = clock
        self._log_settings = log_settings
        self._io_threads = io_threads
        self._server = KafkaServer()
        self._net = net = network_settings(config)
        self._connections = _Connections(_connection_quotas(net, clock))
        queued_max = net.queued_max_request_bytes
        self.request_memory = RequestMemoryPool(queued_max if queued_max > 0 else -1)
        self.request_slots = RequestSlots(net.queued_max_requests)
        self.metrics = BrokerMetrics()
        #: TLS contexts are built here, so a certificate that does not load stops the start at once.
        self.security = ListenerSecurity(config, lambda: monotonic_s(self.clock), clock=self.clock)
        #: The web console, when ``console.listener`` is set (started last, stopped first).
        self.console: Console | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self._rate_gate: ConnectionRateGate | None = None
        self.ctx: BrokerContext | None = None
        self.listeners: list[BoundListener] = []
        self._scheduler: ThreadScheduler | None = None
        self._dir_locks: list[DirLock] = []
        self._stopped = False
        self._log_cleaner: LogCleaner | None = None
        #: Why the broker must stop on its own (every log dir offline), once that happened.
        self.fatal_reason: str | None = None
        #: Called (from any thread) when the broker must stop on its own; serve() sets it.
        self.on_fatal: Callable[[], None] | None = None

    # -- start -----------------------------------------------------------------------------------

    def _open_storage(self) -> tuple[Controller, LogManager, RemoteLogManager | None, str]:
        config = self.config
        for d in config.log_dirs:
            _make_durable_dir(d)
        # Before anything reads a file: a second broker on the same directories must not start.
        for d in dict.fromkeys([*config.log_dirs, metadata_log_dir(config).parent]):
            self._dir_locks.append(DirLock(d).acquire())
        cluster_id = _existing_cluster_id(config.log_dirs) or uuid_to_base64(uuid.uuid4().bytes)
        scheduler = self._scheduler = ThreadScheduler(threads=2)
        mdir = metadata_log_dir(config)
        _make_durable_dir(mdir)
        controller = Controller.open(mdir, controller_settings(config), clock=self.clock,
                                     scheduler=scheduler)
        node_id = config.node_id
        cache: list[tuple[MetadataImage, dict[str, Value]]] = []

        def config_for_topic(topic: str) -> LogConfig:
            image = controller.image
            # Defaults depend on dynamic broker configs; computed once per image, not per partition.
            if not cache or cache[0][0] is not image:
                cache[:] = [(image, effective_topic_defaults(config, image, node_id))]
            return topic_log_config(image, topic, cache[0][1])

        # Every log dir gets this broker's one cluster id (left empty, each new dir would draw its own).
        settings = dataclasses.replace(self._log_settings, cluster_id=cluster_id, node_id=config.node_id)
        manager = LogManager(list(config.log_dirs), config_for_topic, settings, clock=self.clock, scheduler=scheduler)
        manager.failure_channel.on_all_offline = self._all_log_dirs_offline
        controller.on_failure = self._metadata_log_failed
        report = manager.startup_logs()
        sync = LogSync(manager, lambda: controller.image)
        lost = controller.load_result.lost_records
        if lost:
            restore_lost_topics(controller, manager)
        sync.reconcile(controller.image, metadata_lost_records=lost)
        controller.add_listener(sync.on_commit)
        # The remote tier is adopted before retention first runs: a tiered log must see only its
        # local retention, and only once its segments are known to be in the remote tier.
        remote = create_remote_log_manager(config, manager, clock=self.clock, scheduler=scheduler, own_workers=True)
        if remote is not None:
            tier_sync = TierSync(remote, scheduler)
            tier_sync.reconcile(controller.image)
            controller.add_listener(tier_sync.on_commit)
            remote.start()
        else:
            guard_without_remote_tier(metadata_dir_of(config), manager)
        manager.start_background_tasks()
        cleaner = effective_cleaner_settings(config, controller.image, node_id)
        if cleaner.enable:
            self._log_cleaner = LogCleaner(manager, cleaner, clock=self.clock)
            self._log_cleaner.start()
            controller.add_listener(CleanerReconfigurer(self._log_cleaner, config, node_id,
                                                        lambda: controller.image).on_commit)
        log.info("storage up: %d logs, %d segments (%.3f s); metadata at offset %d with %d topics",
                 report.logs, report.segments, report.seconds, controller.image.provenance.last_offset,
                 len(controller.image.topics_by_id))
        return controller, manager, remote, cluster_id

    async def start(self) -> list[BoundListener]:
        config = self.config
        net = self._net
        specs = parse_listeners(net.listeners)
        advertised = parse_advertised_listeners(net.advertised_listeners)
        controller, manager, remote, cluster_id = await asyncio.to_thread(self._open_storage)
        io = StorageIO(self._io_threads, clock=self.clock)
        partitions = PartitionManager(manager, lambda: controller.image, config.node_id, remote)
        handler_settings = request_settings(config)
        partitions.durable_internal = handler_settings.durable_acks != "none"
        # With durable acknowledgements the high watermark moves at the fsync: that wakes long polls.
        manager.set_high_watermark_listener(partitions.waiters.notifier(asyncio.get_running_loop()))
        ctx = self.ctx = BrokerContext(
            config=config, node_id=config.node_id, cluster_id=cluster_id, clock=self.clock, controller=controller,
            log_manager=manager, partitions=partitions, io=io,
            # Never an id the logs' producer states hold, even if the metadata lost its allocation.
            producer_ids=ProducerIdManager(controller, floor=manager.max_producer_id() + 1),
            remote_log_manager=remote, log_cleaner=self._log_cleaner, settings=handler_settings,
            acl_gate=AclGate.from_config(config, lambda: controller.image),
        )
        ctx.quotas = QuotaManager(lambda: controller.image.client_quotas, quota_window(config))
        ctx.connection_rates = IpConnectionRates(lambda: controller.image.client_quotas, quota_window(config))
        broker_rate_limit = _dynamic_int(lambda: controller.image, config.node_id, "max.connection.creation.rate",
                                         net.max_connection_creation_rate)
        ctx.broker_connection_rate = ConnectionCreationRate(broker_rate_limit, quota_window(config))
        self._rate_gate = ConnectionRateGate(ctx.connection_rates, self.clock, ctx.broker_connection_rate)
        ctx.groups = GroupCoordinator(partitions, controller, io, self.clock, group_settings(config))
        await ctx.groups.start()
        ctx.transactions = _transaction_coordinator(ctx)
        await ctx.transactions.start()
        self.security.image = lambda: controller.image
        # Dynamic keystore updates (AlterConfigs on this broker): checked by the handlers before they are
        # recorded, applied after each commit and, at start, from what the metadata log holds.
        ctx.tls_check = self.security.check_dynamic
        own = str(config.node_id)
        self.security.apply_dynamic(controller.image.broker_configs(own))
        controller.add_listener(lambda image, _delta: self.security.apply_dynamic(image.broker_configs(own)))
        await asyncio.to_thread(self.security.start)
        self.metrics.observe(ctx, lambda: [c.client.listener for c in list(self._connections.live)])
        dispatcher = Dispatcher(ctx, all_handlers())
        max_frame = net.socket_request_max_bytes
        receive_timeout_s = net.socket_request_receive_timeout_ms / 1000.0
        asyncio.get_running_loop().set_exception_handler(_quiet_accept_errors(self.clock))
        bound: list[BoundListener] = []
        def connection(name: str) -> KafkaConnection:
            return KafkaConnection(dispatcher, max_frame_bytes=max_frame, registry=self._connections, listener=name,
                                   observer=self.metrics.requests, receive_timeout_s=receive_timeout_s,
                                   memory_pool=self.request_memory, clock=self.clock,
                                   request_slots=self.request_slots)

        inter_broker = config.inter_broker_listener()
        for spec in specs:
            # Kafka's protectedListener: the inter-broker one, when there are others, is left out of the
            # broker-wide rate so that client connections cannot keep the brokers from reaching each other.
            rate = ListenerConnectionRate(
                spec.name, _listener_rate_limit(lambda: controller.image, config, spec.name, broker_rate_limit),
                quota_window(config), broker=ctx.broker_connection_rate,
                protected=spec.name.upper() == inter_broker and len(specs) > 1)
            ctx.listener_connection_rates.append(rate)
            # The connection creation rates and the ip entities' connection_creation_rate first, before
            # TLS and the connection counts (as Kafka).
            factory = self._rate_gate.wrap(self.security.factory(spec.name, connection), rate)
            bound += await self._server.start([spec], factory, advertised)
        self.listeners = ctx.listeners = bound
        metrics_address = net.metrics_listener
        if metrics_address:
            await asyncio.to_thread(self.metrics.start_endpoint, metrics_address)
        console_address = net.console_listener
        if console_address:
            self.console = Console(ctx, self.metrics.requests)
            await asyncio.to_thread(self.console.start, console_address)
        await asyncio.to_thread(_warm_up)
        # Everything alive now (modules, kio schemas, numba's compiled code, loaded logs) lives as long
        # as the broker. A full collection walks all of it -- about 40 ms here, which stalls every
        # connection -- so it is moved out of the collector's sight.
        gc.collect()
        gc.freeze()
        self._idle_task = asyncio.get_running_loop().create_task(self._expire_idle())
        return bound

    def _all_log_dirs_offline(self, reason: str) -> None:
        self._fatal(f"every log dir is offline (last: {reason})")

    def _metadata_log_failed(self, reason: str) -> None:
        self._fatal(reason)

    def _fatal(self, reason: str) -> None:
        if self.fatal_reason is None:
            self.fatal_reason = reason
        if self.on_fatal is not None:
            self.on_fatal()

    async def _expire_idle(self) -> None:
        idle_s = self._net.connections_max_idle_ms / 1000.0
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(max(idle_s / 4, 0.05), 30.0))
            now = loop.time()
            for connection in list(self._connections.live):
                if now - connection.last_active > idle_s and not connection.in_handler:
                    # Aborted: an idle connection with unsent responses has a client that stopped reading.
                    log.info("closing idle connection %s from %s:%d (connections.max.idle.ms)",
                             connection.client.connection_id, connection.client.host, connection.client.port)
                    connection.close(abort=True)

    # -- stop ------------------------------------------------------------------------------------

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        await self._server.close()
        if self._rate_gate is not None:
            self._rate_gate.close()
        self.security.close()
        if self.console is not None:
            await asyncio.to_thread(self.console.close)
        await asyncio.to_thread(self.metrics.close)
        if self._idle_task is not None:
            self._idle_task.cancel()
        ctx = self.ctx
        if ctx is not None and ctx.transactions is not None:
            await ctx.transactions.stop()
        if ctx is not None and ctx.groups is not None:
            await ctx.groups.stop()
        for connection in list(self._connections.live):
            connection.close()
        if ctx is not None:
            ctx.partitions.waiters.notify_all()
            await asyncio.to_thread(ctx.io.shutdown)
            await asyncio.to_thread(self._close_storage, ctx)

    def _close_storage(self, ctx: BrokerContext) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown()
        clean = True
        # Each step runs even if the one before failed: a log dir that cannot be checkpointed must
        # not leave the metadata log open (the next start then recovers that dir, as after a crash).
        # The remote log manager goes first: its copy tasks read the local segments.
        steps = [ctx.log_manager.shutdown, ctx.controller.close]
        if ctx.log_cleaner is not None:
            steps.insert(0, ctx.log_cleaner.shutdown)  # a cleaning stops between groups, before the logs close
        if ctx.remote_log_manager is not None:
            steps.insert(0, ctx.remote_log_manager.close)
        for step in steps:
            try:
                step()
            except Exception:
                clean = False
                log.exception("shutdown step %s failed", getattr(step, "__qualname__", step))
        for lock in self._dir_locks:
            lock.release()
        if clean:
            log.info("broker stopped cleanly")
        else:
            raise RuntimeError("the broker did not stop cleanly; the next start recovers")


def _make_durable_dir(d: Path) -> None:
    """Create ``d`` (and its parents) with every new entry fsynced: a directory whose entry is lost
    in a power cut takes everything acknowledged inside it along."""
    missing = [p for p in (d, *d.parents) if not p.exists()]
    d.mkdir(parents=True, exist_ok=True)
    for p in reversed(missing):
        fsync_dir(p.parent)


#: Test-only: the name of one of the transaction coordinator's CRASH_STEPS at which the broker
#: SIGKILLs itself (tests/integration/test_txn_recovery.py). Unset in any real deployment.
CRASH_AT_ENV = "TIERLOG_TEST_CRASH_AT"


def _crash_hook() -> Callable[[str], None] | None:
    step = os.environ.get(CRASH_AT_ENV)
    if not step:
        return None
    if step not in CRASH_STEPS:
        raise ConfigError(CRASH_AT_ENV, f"{step} is none of {', '.join(CRASH_STEPS)}")
    log.warning("%s=%s: this broker kills itself when a transaction's end reaches that step", CRASH_AT_ENV, step)

    def hook(reached: str) -> None:
        if reached == step:
            log.warning("%s: SIGKILL at %s", CRASH_AT_ENV, step)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    return hook


def _transaction_coordinator(ctx: BrokerContext) -> TransactionCoordinator:
    assert ctx.groups is not None
    return TransactionCoordinator(ctx.partitions, ctx.controller, ctx.io, ctx.clock, ctx.groups,
                                  ctx.producer_ids.next_blocking, txn_settings(ctx.config), crash_hook=_crash_hook())


def _quiet_accept_errors(clock: Clock = SYSTEM_CLOCK) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """An event-loop exception handler that turns asyncio's traceback for an ``accept`` that failed
    for lack of descriptors (EMFILE; asyncio retries a second later) into one warning line per
    ten seconds; everything else goes to the default handler."""
    last = [0.0]
    suppressed = [0]

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            now = monotonic_s(clock)
            if now - last[0] >= 10.0:
                log.warning("cannot accept connections: %s (raise the open-file limit or lower max.connections; "
                            "%d more such failures since the last report)", context.get("exception"), suppressed[0])
                last[0], suppressed[0] = now, 0
            else:
                suppressed[0] += 1
            return
        loop.default_exception_handler(context)

    return handler


def _warm_up() -> None:
    """Load the compiled record walk of the produce path now rather than on the first produce."""
    from tierlog.records import BatchHeader, SimpleRecord, build_batch, validate_batch

    validate_batch(BatchHeader(bytearray(build_batch([SimpleRecord(b"k", b"v", timestamp=0)])), 0))


async def serve(config: BrokerConfig, log_settings: LogManagerSettings) -> int:
    """Run a broker until SIGTERM or SIGINT; the exit code."""
    soft, hard = raise_open_file_limit()
    log.info("open-file limit %d (hard %d)", soft, hard)
    broker = Broker(config, log_settings)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def fatal() -> None:
        loop.call_soon_threadsafe(stop.set)

    broker.on_fatal = fatal
    try:
        bound = await broker.start()
    except TierlogError as e:
        print(f"tierlog: cannot start: {e}", file=sys.stderr, flush=True)
        return 1
    except OSError as e:
        print(f"tierlog: cannot listen: {e.strerror or e}", file=sys.stderr, flush=True)
        await broker.stop()
        return 1
    if broker.metrics.url is not None:
        # Before the listener lines, so whoever waits for those has this one too.
        print(f"tierlog metrics on {broker.metrics.url}", flush=True)
    if broker.console is not None and broker.console.url is not None:
        print(f"tierlog console on {broker.console.url}", flush=True)
    for b in bound:
        # Tests and scripts find the port (which may have been 0) in this line.
        print(f"tierlog listening on {b.host}:{b.port}", flush=True)
    await stop.wait()
    print("tierlog stopping", flush=True)
    try:
        await broker.stop()
    except RuntimeError as e:
        print(f"tierlog: {e}", file=sys.stderr, flush=True)
        return 1
    if broker.fatal_reason is not None:
        print(f"tierlog: stopped: {broker.fatal_reason}", file=sys.stderr, flush=True)
        return 1
    print("tierlog stopped cleanly", flush=True)
    return 0
