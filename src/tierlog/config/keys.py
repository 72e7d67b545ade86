"""Every configuration key tierlog understands, defined once.

Topic keys name the broker keys that set their defaults (Kafka's synonyms); broker keys that are
only such defaults are defined here too, so a ``server.properties`` written for Kafka validates.
Each key's "valid values" text comes from its validator (see ``definition.Validator``).
"""

from __future__ import annotations

import math

from tierlog.config.definition import (
    INT32_MAX,
    INT64_MAX,
    AtLeast,
    ConfigDef,
    ConfigKey,
    DottedPath,
    HostCounts,
    HostPort,
    Importance,
    Listeners,
    NonEmpty,
    Scope,
    Type,
    Validator,
    Value,
    at_least,
    between,
    one_of,
)
from tierlog.config.kafka_keys import KAFKA_KEYS
from tierlog.config.security_keys import SECURITY_KEYS

H = Importance.HIGH
M = Importance.MEDIUM
L = Importance.LOW
HOUR_MS = 3_600_000
MINUTE_MS = 60_000


def _topic(name: str, type_: Type, default: Value, doc: str, *, importance: Importance = M,
           validator: Validator | None = None, valid: str = "", synonyms: tuple[tuple[str, int], ...] = (),
           aliases: tuple[str, ...] = (), group: str = "log") -> ConfigKey:
    return ConfigKey(name=name, type=type_, default=default, doc=doc, importance=importance,
                     scope=Scope.TOPIC, validator=validator, valid_values=valid,
                     broker_synonyms=synonyms, aliases=aliases, group=group)


def _broker(name: str, type_: Type, default: Value, doc: str, *, importance: Importance = M,
            validator: Validator | None = None, valid: str = "", internal: bool = False, dynamic: bool = False,
            deprecated_aliases: tuple[str, ...] = (), group: str = "broker") -> ConfigKey:
    return ConfigKey(name=name, type=type_, default=default, doc=doc, importance=importance,
                     scope=Scope.BROKER, validator=validator, valid_values=valid, internal=internal,
                     dynamic=dynamic, deprecated_aliases=deprecated_aliases, group=group)


TOPIC_KEYS: list[ConfigKey] = [
    _topic("segment.bytes", Type.INT, 1073741824,
           "The size at which the active segment is closed and a new one started.",
           importance=H, validator=at_least(14), synonyms=(("log.segment.bytes", 1),)),
    _topic("segment.ms", Type.LONG, 604800000,
           "The time after which the active segment is rolled even if it is not full, so that retention "
           "can delete or tier it.",
           validator=at_least(1), synonyms=(("log.roll.ms", 1), ("log.roll.hours", HOUR_MS))),
    _topic("segment.jitter.ms", Type.LONG, 0,
           "The largest random jitter subtracted from segment.ms per segment, so many partitions do not roll "
           "at the same moment.",
           validator=at_least(0), synonyms=(("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", HOUR_MS))),
    _topic("segment.index.bytes", Type.INT, 10485760,
           "The preallocated size of each segment's offset and time index files; a segment also rolls when "
           "an index is full.",
           validator=at_least(4), synonyms=(("log.index.size.max.bytes", 1),)),
    _topic("index.interval.bytes", Type.INT, 4096,
           "How many bytes of records lie between two offset index entries; smaller means larger indexes "
           "and shorter scans.",
           validator=at_least(0), synonyms=(("log.index.interval.bytes", 1),)),
    _topic("retention.ms", Type.LONG, 604800000,
           "How long a closed segment is kept after its largest timestamp before it is deleted; -1 keeps "
           "segments forever.",
           importance=H, validator=at_least(-1),
           synonyms=(("log.retention.ms", 1), ("log.retention.minutes", MINUTE_MS), ("log.retention.hours", HOUR_MS))),
    _topic("retention.bytes", Type.LONG, -1,
           "The largest size a partition's log may grow to before its oldest segments are deleted; any "
           "negative value means unbounded.",
           importance=H, valid="any long; negative: unbounded", synonyms=(("log.retention.bytes", 1),)),
    _topic("log.retention.min.timestamp", Type.LONG, 0,
           "Timestamp floor (seed 004, KIP-47), in Unix ms: every leading segment whose largest timestamp is "
           "below it is deleted, for CreateTime and LogAppendTime alike; 0 turns it off.",
           importance=H, validator=at_least(0), aliases=("retention.min.timestamp",),
           synonyms=(("log.retention.min.timestamp", 1),)),
    _topic("file.delete.delay.ms", Type.LONG, 60000,
           "How long the files of a deleted segment stay on disk (renamed .deleted) before they are removed, "
           "so readers that still hold them can finish.",
           validator=at_least(0), synonyms=(("log.segment.delete.delay.ms", 1),)),
    _topic("preallocate", Type.BOOLEAN, False,
           "Whether a new segment file is preallocated at segment.bytes.",
           synonyms=(("log.preallocate", 1),)),
    _topic("cleanup.policy", Type.LIST, ("delete",),
           "delete removes old segments by time, size and timestamp floor; compact keeps the latest record "
           "of each key (the log cleaner); both may be given (compact,delete).",
           validator=one_of("delete", "compact"), synonyms=(("log.cleanup.policy", 1),)),
    _topic("min.cleanable.dirty.ratio", Type.DOUBLE, 0.5,
           "The log cleaner cleans a compacted log once its dirty (not yet cleaned) bytes are at least this "
           "share of its cleanable bytes.",
           validator=between(0, 1), synonyms=(("log.cleaner.min.cleanable.ratio", 1),), group="cleaner"),
    _topic("delete.retention.ms", Type.LONG, 86400000,
           "How long a tombstone (and a transaction marker with no data left) stays in a compacted log after "
           "the cleaning that first saw it, so consumers reading from the start still see the delete.",
           validator=at_least(0), synonyms=(("log.cleaner.delete.retention.ms", 1),), group="cleaner"),
    _topic("min.compaction.lag.ms", Type.LONG, 0,
           "The least time a record stays uncompacted: segments whose newest record is younger are not cleaned.",
           validator=at_least(0), synonyms=(("log.cleaner.min.compaction.lag.ms", 1),), group="cleaner"),
    _topic("max.compaction.lag.ms", Type.LONG, INT64_MAX,
           "The longest a record may stay uncompacted: a log whose oldest dirty record is older is cleaned "
           "whatever its dirty ratio (and its active segment rolls by then).",
           validator=at_least(1), synonyms=(("log.cleaner.max.compaction.lag.ms", 1),), group="cleaner"),
    _topic("max.message.bytes", Type.INT, 1048588,
           "The largest record batch (after compression) the log accepts in one produce.",
           importance=M, validator=at_least(0), synonyms=(("message.max.bytes", 1),)),
    _topic("message.timestamp.type", Type.STRING, "CreateTime",
           "Whether a record's timestamp is the producer's (CreateTime) or the broker's time of append "
           "(LogAppendTime).",
           validator=one_of("CreateTime", "LogAppendTime"), synonyms=(("log.message.timestamp.type", 1),)),
    _topic("flush.messages", Type.LONG, INT64_MAX,
           "Force an fsync of the log after this many records; the default leaves flushing to the OS.",
           validator=at_least(1), synonyms=(("log.flush.interval.messages", 1),)),
    _topic("flush.ms", Type.LONG, INT64_MAX,
           "Force an fsync of the log when its oldest unflushed data is this old; the default leaves "
           "flushing to the OS.",
           validator=at_least(0), synonyms=(("log.flush.interval.ms", 1),)),
    _topic("compression.type", Type.STRING, "producer",
           "The codec batches are stored with: producer keeps the producer's codec, any other value "
           "recompresses to it (none is the same as uncompressed).",
           validator=one_of("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"),
           synonyms=(("compression.type", 1),)),
    _topic("min.insync.replicas", Type.INT, 1,
           "Accepted for compatibility with Kafka clients and tools; a single node is always in sync.",
           validator=at_least(1), synonyms=(("min.insync.replicas", 1),)),
    _topic("remote.storage.enable", Type.BOOLEAN, False,
           "Copy this topic's closed segments to the remote tier (needs remote.log.storage.system.enable "
           "on the broker).",
           importance=M, group="tiered"),
    _topic("local.retention.ms", Type.LONG, -2,
           "How long local copies of segments already in the remote tier are kept; -2 means retention.ms, "
           "and it may not exceed retention.ms.",
           validator=at_least(-2), synonyms=(("log.local.retention.ms", 1),), group="tiered"),
    _topic("local.retention.bytes", Type.LONG, -2,
           "How large the local part of a tiered log may grow; -2 means retention.bytes, and it may not "
           "exceed retention.bytes.",
           validator=at_least(-2), synonyms=(("log.local.retention.bytes", 1),), group="tiered"),
    _topic("message.timestamp.before.max.ms", Type.LONG, INT64_MAX,
           "How far in the past a CreateTime timestamp may lie before the batch is rejected.",
           validator=at_least(0), synonyms=(("log.message.timestamp.before.max.ms", 1),)),
    _topic("message.timestamp.after.max.ms", Type.LONG, HOUR_MS,
           "How far in the future a CreateTime timestamp may lie before the batch is rejected.",
           validator=at_least(0), synonyms=(("log.message.timestamp.after.max.ms", 1),)),
]

# Broker keys that exist only as defaults for topic keys (Kafka's synonyms).
_SYNONYM_DEFAULTS: dict[str, Value] = {
    "log.roll.hours": 168,
    "log.retention.hours": 168,
    "log.roll.jitter.hours": 0,
}

_UNITS = {1: "", MINUTE_MS: ", in minutes", HOUR_MS: ", in hours"}


def _scaled(validator: Validator | None, multiplier: int) -> Validator | None:
    """The validator of a synonym counted in a coarser unit (hours for ms): special values (-1, 0)
    carry over unscaled, a positive minimum is rounded up to the coarser unit."""
    if multiplier == 1 or validator is None:
        return validator
    if isinstance(validator, AtLeast):
        minimum = validator.minimum
        return AtLeast(minimum if minimum <= 0 else math.ceil(minimum / multiplier))
    raise ValueError(f"no scaled form of {validator!r}")


def _synonym_keys() -> list[ConfigKey]:
    out: list[ConfigKey] = []
    seen: set[str] = set()
    for topic_key in TOPIC_KEYS:
        names = [s for s, _ in topic_key.broker_synonyms]
        for index, (syn, mult) in enumerate(topic_key.broker_synonyms):
            if syn in seen:
                continue
            seen.add(syn)
            default = _SYNONYM_DEFAULTS.get(syn, topic_key.default if len(names) == 1 else None)
            doc = f"{topic_key.doc} Broker-wide default of the topic key {topic_key.name}{_UNITS[mult]}"
            doc += f"; ignored when {' or '.join(names[:index])} is set." if index else "."
            # Kafka counts hours and minutes in an int; an int of hours always fits a long of ms.
            type_ = Type.INT if mult != 1 else topic_key.type
            out.append(ConfigKey(
                name=syn, type=type_, default=default, doc=doc, importance=topic_key.importance,
                scope=Scope.BROKER, validator=_scaled(topic_key.validator, mult),
                valid_values="" if topic_key.validator is not None else topic_key.valid_values,
                dynamic=True, group=topic_key.group))
    return out


_COMPAT_DOC = "Accepted so that a Kafka server.properties works unchanged; a single tierlog node ignores it."


def _compat(name: str, type_: Type, default: Value, *, validator: Validator | None = None) -> ConfigKey:
    return _broker(name, type_, default, _COMPAT_DOC, importance=L, validator=validator, group="compatibility")


BROKER_KEYS: list[ConfigKey] = [
    _broker("node.id", Type.INT, 1, "This broker's id, as clients and the metadata log see it.",
            importance=H, validator=at_least(0)),
    _broker("broker.id", Type.INT, None,
            "The old name of node.id, accepted for old configs; when both are set they must be equal.",
            validator=at_least(0)),
    _broker("listeners", Type.LIST, ("PLAINTEXT://127.0.0.1:9092",),
            "The addresses the Kafka protocol listens on.", importance=H, validator=Listeners(required=True)),
    _broker("advertised.listeners", Type.LIST, None,
            "The addresses given to clients, by listener name; unset, clients are told the listeners.",
            validator=Listeners()),
    _broker("log.dirs", Type.LIST, None, "The directories partitions are stored in; unset, log.dir is used.",
            importance=H, valid="comma-separated list of directories"),
    _broker("log.dir", Type.STRING, "./tierlog-data", "The log directory used when log.dirs is not set.",
            importance=H, validator=NonEmpty("a directory path")),
    _broker("num.partitions", Type.INT, 1, "The number of partitions of a topic created without a count.",
            validator=at_least(1)),
    _broker("auto.create.topics.enable", Type.BOOLEAN, True,
            "Create a topic that a client asks metadata for and that does not exist yet."),
    _broker("sanity.check.all.logs.enabled", Type.BOOLEAN, True,
            "Seed 003 (KIP-263): sanity-check every segment's indexes at startup. When false and the shutdown "
            "was clean, only each partition's active segment is checked; the rest are checked lazily.",
            importance=H, group="log"),
    _broker("log.retention.check.interval.ms", Type.LONG, 300000,
            "How often time, size and timestamp-floor retention runs over every log.",
            validator=at_least(1), group="log"),
    _broker("log.flush.scheduler.interval.ms", Type.LONG, INT64_MAX,
            "How often logs are checked for data older than flush.ms.", validator=at_least(1), group="log"),
    _broker("log.durable.acks", Type.STRING, "all",
            "The lowest acks level answered only once the produced batches are fsynced (group commit: the "
            "produce requests of a log dir share one fdatasync). all: acks=all waits for the disk; 1: acks=1 and "
            "acks=all wait; none: Kafka's behaviour, answer once appended (to the page cache) and flush by "
            "flush.messages and flush.ms -- acknowledged records then survive a process crash but not a power "
            "cut. Under all and 1 a record counts as committed once fsynced, whatever its produce's acks: "
            "consumers read (and ListOffsets latest answers) only up to the high watermark, which follows the "
            "fsyncs; under none it is the log end offset, as on a single-node Kafka. tierlog has no replicas, "
            "so all is the default.",
            importance=H, validator=one_of("all", "1", "none"), group="log"),
    _broker("log.dir.unflushed.max.bytes", Type.LONG, 134217728,
            "The bytes appended to one log dir by produce requests (and internal writes) that wait for their "
            "group commit's fsync. Past it, a durable produce waits before appending until a sync brings the "
            "bytes under it, so a slow disk slows producers instead of growing the broker's queues and the page "
            "cache. It can be passed by the requests let in at once (each is whole). Only requests answered "
            "after an fsync count (log.durable.acks); with none the kernel's dirty-page limits apply.",
            validator=at_least(1), group="log"),
    _broker("log.dir.syncfs.min.files", Type.INT, 4,
            "Group commit: when this many segment files of one log dir or more start their syncs together "
            "(the partitions of one produce request, or files that waited while every sync thread was busy), "
            "one syncfs of the log dir's filesystem replaces their fdatasyncs: it writes every dirty page of "
            "that filesystem, so it covers them at about the cost of one fdatasync (used on Linux 5.8 and "
            "later, where syncfs reports writeback errors, and on ext2/3/4, XFS and Btrfs only; a write error "
            "anywhere on that filesystem then takes the log dir offline). 0: an fdatasync per file, always -- for a log dir on a filesystem "
            "other programs write much to, whose dirty pages each syncfs would write too.",
            validator=at_least(0), group="log"),
    _broker("log.flush.offset.checkpoint.interval.ms", Type.INT, 60000,
            "How often each log directory's recovery points are checkpointed.",
            validator=at_least(0), group="log"),
    _broker("log.flush.start.offset.checkpoint.interval.ms", Type.INT, 60000,
            "How often each log directory's log start offsets are checkpointed.",
            validator=at_least(0), group="log"),
    _broker("log.lazy.check.interval.ms", Type.LONG, 1000,
            "How often the background checker of seed 003 checks a batch of not yet checked segments.",
            validator=at_least(1), group="log"),
    _broker("log.cleaner.enable", Type.BOOLEAN, True,
            "Run the log cleaner, which compacts topics with cleanup.policy compact (__consumer_offsets too).",
            group="cleaner"),
    _broker("log.cleaner.threads", Type.INT, 1, "Threads that clean logs.", validator=at_least(0), group="cleaner", dynamic=True),
    _broker("log.cleaner.backoff.ms", Type.LONG, 15000,
            "How long a cleaner thread sleeps when no log needs cleaning.", validator=at_least(0), group="cleaner", dynamic=True),
    _broker("log.cleaner.io.max.bytes.per.second", Type.DOUBLE, 1.7976931348623157e308,
            "The cleaners' combined read plus write rate limit.", validator=at_least(0), group="cleaner", dynamic=True),
    _broker("log.cleaner.io.buffer.size", Type.INT, 524288,
            "Bytes read from a segment at a time while cleaning (a larger batch is read whole).",
            validator=at_least(0), group="cleaner", dynamic=True),
    _broker("log.cleaner.dedupe.buffer.size", Type.LONG, 134217728,
            "Memory for the key to offset maps of all cleaner threads (24 bytes per key: a 16-byte key digest "
            "and an 8-byte offset); a dirty range with more keys is cleaned in parts.",
            validator=at_least(0), group="cleaner", dynamic=True),
    _broker("log.cleaner.io.buffer.load.factor", Type.DOUBLE, 0.9,
            "How full a cleaner's key to offset map may get before the cleaning stops at that offset.",
            validator=between(0, 1), group="cleaner", dynamic=True),
    _broker("num.recovery.threads.per.data.dir", Type.INT, 2,
            "Threads per log directory that load and recover logs at startup.",
            validator=at_least(1), group="log"),
    _broker("producer.id.expiration.ms", Type.INT, 86400000,
            "A producer with no batch newer than this is forgotten; also the window of segments replayed to "
            "rebuild a missing producer snapshot before upload (seed 001, KIP-952).",
            importance=H, validator=at_least(1), dynamic=True, group="producer"),
    _broker("producer.id.expiration.check.interval.ms", Type.INT, 600000,
            "How often expired producers are removed.", validator=at_least(1), internal=True, group="producer"),
    _broker("metadata.log.max.record.bytes.between.snapshots", Type.LONG, 20971520,
            "Seed 000: take a metadata snapshot once this many bytes were appended to the metadata log "
            "since the latest one.", validator=at_least(1), group="metadata", dynamic=True),
    _broker("metadata.log.max.snapshot.interval.ms", Type.LONG, 3600000,
            "Seed 000 (KIP-876): take a snapshot when a record not in the latest snapshot is older than this; "
            "0 disables time-based snapshots.", importance=H, validator=at_least(0), group="metadata", dynamic=True),
    _broker("metadata.max.retention.bytes", Type.LONG, 104857600,
            "Soft bound on the metadata log plus its snapshots; the newest snapshot is always kept.",
            valid="any long; negative: no bound", group="metadata", dynamic=True),
    _broker("metadata.max.retention.ms", Type.LONG, 604800000,
            "Snapshots older than this are deleted; the newest snapshot is always kept.",
            valid="any long; negative: no bound", group="metadata", dynamic=True),
    _broker("metadata.log.segment.bytes", Type.INT, 1073741824, "The segment size of the metadata log.",
            validator=at_least(12), group="metadata"),
    _broker("metadata.log.segment.ms", Type.LONG, 604800000,
            "The time after which the metadata log's active segment is rolled.",
            validator=at_least(1), group="metadata"),
    _broker("socket.request.max.bytes", Type.INT, 104857600,
            "The largest request frame accepted; a larger one closes the connection.",
            validator=at_least(1), group="network"),
    _broker("max.request.partition.size.limit", Type.INT, 2000,
            "The most partitions one DescribeTopicPartitions response holds (Kafka's); a client asking for more "
            "gets the rest through the response's cursor.", validator=at_least(1), group="network"),
    _broker("socket.request.receive.timeout.ms", Type.LONG, 30000,
            "How long a request may take to arrive once its first byte is in; a connection whose request is "
            "still incomplete then is closed (a client that sent half a request and stalled, or one that sends a "
            "byte a second). The clock stops while the broker itself holds the client back (its queue of "
            "requests is full). tierlog's own key: clients give up on a request after 30 s (request.timeout.ms) "
            "anyway.",
            validator=at_least(1), group="network"),
    _broker("queued.max.requests", Type.INT, 500,
            "The requests held across all connections -- received whole and not yet answered, durable produces "
            "waiting for their fsync included (Kafka's bound on the request queue in front of its handler "
            "threads). At it, a connection that holds a request is not read until one is answered somewhere; one "
            "holding none still is, so the bound can be passed by one request per connection.",
            importance=H, validator=at_least(1), group="network"),
    _broker("queued.max.request.bytes", Type.LONG, 536870912,
            "The bytes of requests held in memory across all connections -- received, whole or in part, and not "
            "yet served. Above it, a connection holding part of a request (or more than one request) is not read "
            "until bytes come back; one with a single whole request still is, so small requests keep being served. "
            "The bound can be passed by one read (256 KiB) per connection. -1 or 0: no bound (Kafka's default is "
            "-1); tierlog bounds it by default so thousands of clients each sending a large request cannot "
            "exhaust memory.", validator=at_least(-1), group="network"),
    _broker("max.connections", Type.INT, INT32_MAX,
            "The most client connections open at once; a connection beyond it is closed at once. Whatever this "
            "says, a connection is refused when the process's open-file limit is within a tenth (at least 256) "
            "of being used up, so the log files always have descriptors.",
            validator=at_least(0), group="network"),
    _broker("max.connections.per.ip", Type.INT, INT32_MAX,
            "The most connections open at once from one client address; one beyond it is closed at once.",
            validator=at_least(0), group="network"),
    _broker("max.connections.per.ip.overrides", Type.STRING, "",
            "Per-address exceptions to max.connections.per.ip, e.g. 'hostName:100,127.0.0.1:200' (host names are "
            "resolved at startup).", validator=HostCounts(), group="network"),
    _broker("max.connection.creation.rate", Type.INT, INT32_MAX,
            "The most new connections per second the broker takes, over all its listeners, measured as "
            "client quotas' rates are (quota.window.num windows of quota.window.size.seconds). As Kafka's "
            "acceptor does, a listener takes its new connections one at a time: one that brings the rate over "
            "the limit waits, unread, for the time that brings the rate back to it (at most one window), and "
            "the listener's newer connections wait behind it; none is closed for it. Applied before an ip "
            "quota's connection_creation_rate. Dynamic, per broker or cluster-wide: the next connection uses "
            "the new value. Also settable per listener, listener.name.<listener>.max.connection.creation.rate "
            "(static or dynamic): each listener has its own rate beside the broker's, limited by its own value "
            "or else this one, and a connection waits the longer of the two throttle times. The "
            "inter-broker listener (inter.broker.listener.name, else the one named for "
            "security.inter.broker.protocol), when there is more than one listener, is left out of the "
            "broker-wide rate and limited by its own alone.", validator=at_least(0), group="network", dynamic=True),
    _broker("connections.max.idle.ms", Type.LONG, 600000,
            "A connection with no bytes received and no response written for this long is closed, unless a "
            "request of it is still being handled (a long-polling fetch); a client that stopped reading its "
            "responses counts as idle.", validator=at_least(1), group="network"),
    _broker("quota.window.num", Type.INT, 11,
            "The number of samples a client quota's rate is measured over (Kafka's quota.window.num): a "
            "client's byte rate, request time and mutation rate are averaged over this many windows of "
            "quota.window.size.seconds.", validator=at_least(1), group="quotas"),
    _broker("quota.window.size.seconds", Type.INT, 1,
            "The length of one sample window of a client quota's rate (Kafka's quota.window.size.seconds).",
            validator=at_least(1), group="quotas"),
    _broker("group.initial.rebalance.delay.ms", Type.INT, 3000,
            "How long a new consumer group waits for more members before its first rebalance.",
            validator=at_least(0), group="groups"),
    _broker("group.min.session.timeout.ms", Type.INT, 6000,
            "The smallest session timeout a consumer may ask for; at most group.max.session.timeout.ms.",
            validator=at_least(0), group="groups"),
    _broker("group.max.session.timeout.ms", Type.INT, 1800000,
            "The largest session timeout a consumer may ask for.", validator=at_least(0), group="groups"),
    _broker("group.consumer.assignors", Type.LIST, ("uniform", "range"),
            "The server-side assignors of consumer groups (KIP-848, group.protocol=consumer); the first is used "
            "when a member names none. Kafka's names (uniform, range) or its class names are accepted.",
            validator=one_of("uniform", "range", "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
                             "org.apache.kafka.coordinator.group.assignor.RangeAssignor"), group="groups"),
    _broker("group.consumer.session.timeout.ms", Type.INT, 45000,
            "A member of a consumer group (KIP-848) that sends no heartbeat for this long is removed and its "
            "partitions reassigned.", validator=at_least(1), group="groups"),
    _broker("group.consumer.heartbeat.interval.ms", Type.INT, 5000,
            "How often members of a consumer group (KIP-848) are told to heartbeat.",
            validator=at_least(1), group="groups"),
    _broker("offsets.retention.minutes", Type.INT, 10080,
            "The committed offsets of a group expire this long after the group became empty (for offsets "
            "committed without a group membership: after their commit; a consumer group with members keeps the "
            "offsets of the topics it subscribes to and expires the others this long after their commit) and get "
            "tombstones in __consumer_offsets.",
            validator=at_least(1), group="groups"),
    _broker("offsets.topic.segment.bytes", Type.INT, 104857600,
            "segment.bytes of __consumer_offsets: small segments, so the log cleaner can compact it early.",
            validator=at_least(1), group="groups"),
    _broker("offsets.retention.check.interval.ms", Type.LONG, 600000,
            "How often expired committed offsets and empty consumer groups without committed offsets are "
            "removed (with tombstones in __consumer_offsets).", validator=at_least(1), group="groups"),
    _broker("offsets.topic.num.partitions", Type.INT, 50, "The number of partitions of __consumer_offsets.",
            validator=between(1, 10000), group="groups"),
    _broker("transaction.state.log.num.partitions", Type.INT, 50,
            "The number of partitions of __transaction_state, created the first time a transactional "
            "producer needs its coordinator.", validator=between(1, 10000), group="transactions"),
    _broker("transaction.state.log.segment.bytes", Type.INT, 104857600,
            "The segment size of __transaction_state (small, so loading it at startup stays cheap).",
            validator=at_least(1024), group="transactions"),
    _broker("transaction.max.timeout.ms", Type.INT, 900000,
            "The largest transaction.timeout.ms a producer may ask for; InitProducerId with more is "
            "refused with INVALID_TRANSACTION_TIMEOUT.", validator=at_least(1), group="transactions"),
    _broker("transaction.abort.timed.out.transaction.cleanup.interval.ms", Type.INT, 10000,
            "How often the transaction coordinator aborts transactions open longer than their timeout.",
            validator=at_least(1), group="transactions"),
    _broker("transactional.id.expiration.ms", Type.INT, 604800000,
            "How long a transactional id with no transaction in progress is kept without updates before "
            "the coordinator forgets it (a tombstone in __transaction_state).", validator=at_least(1),
            group="transactions"),
    _broker("transaction.remove.expired.transaction.cleanup.interval.ms", Type.INT, 3600000,
            "How often transactional ids idle past transactional.id.expiration.ms are removed (a tombstone each "
            "in __transaction_state). Earlier tierlog builds spelt this key transactions.remove.expired.transaction."
            "cleanup.interval.ms (not Kafka's name): that name still works, with a WARNING; setting both is an "
            "error.",
            validator=at_least(1), deprecated_aliases=("transactions.remove.expired.transaction.cleanup.interval.ms",),
            group="transactions"),
    _broker("remote.log.storage.system.enable", Type.BOOLEAN, False,
            "Enable tiered storage on this broker; topics opt in with remote.storage.enable.",
            importance=H, group="tiered"),
    _broker("remote.log.storage.manager.class.name", Type.STRING,
            "tierlog.tiered.backends.local.LocalDirectoryRemoteStorageManager",
            "The RemoteStorageManager plugin, by dotted path; its properties are those prefixed rsm.config.",
            validator=DottedPath(), group="tiered"),
    _broker("remote.log.storage.manager.impl.prefix", Type.STRING, "rsm.config.",
            "The prefix of the properties handed to the RemoteStorageManager.", validator=NonEmpty("a property name prefix"),
            group="tiered"),
    _broker("remote.log.metadata.custom.metadata.max.bytes", Type.INT, 128,
            "Seed 002 (KIP-917): largest custom metadata a plugin may return; above it the copy is undone "
            "and that partition's copy task stops with an error.", importance=H, validator=at_least(0),
            group="tiered"),
    _broker("remote.log.manager.task.interval.ms", Type.LONG, 30000,
            "How often the copy and expiry passes of the remote tier run.", validator=at_least(1), group="tiered"),
    _broker("remote.log.compaction.enable", Type.BOOLEAN, True,
            "tierlog's own (issue 18): compact the remote tier of compacted topics in the broker, after each "
            "copy run, when it is dirty enough. false leaves that to tierlog spark compact (whose swaps the "
            "broker still applies); segments are still cleaned locally before they are uploaded.",
            dynamic=False, group="tiered"),
    _broker("remote.log.compaction.job.lease.ms", Type.LONG, 120000,
            "tierlog's own (issue 18): how long a tierlog spark compact job's intent may go untouched before the "
            "broker takes the job for dead, deletes what it uploaded and refuses its commit. The job, given the "
            "broker's config (--config), touches its intents every tenth of this (at most every 10 s); raise it "
            "above the longest stall of the job's driver (a GC pause, a suspended VM or container).",
            validator=at_least(1000), dynamic=False, group="tiered"),
    _broker("remote.log.manager.delete.retry.max.attempts", Type.INT, 10,
            "Attempts (the first included) to delete a remote segment whose delete failed, e.g. an upload "
            "seed 002 undoes, before the broker gives up: the leftover is then reported (tierlog tier status, "
            "tierlog_remote_delete_given_up_segments, an ERROR line) until tierlog tier retry-delete or "
            "forget-delete settles it, or a restart starts the attempts afresh.",
            validator=at_least(1), group="tiered"),
    _broker("remote.log.manager.delete.retry.backoff.max.ms", Type.LONG, 3600000,
            "Longest wait between two attempts to delete a remote segment; the wait starts at "
            "remote.log.manager.task.interval.ms (the expiration pass that retries runs that often) and "
            "doubles after each failed attempt.", validator=at_least(1), group="tiered"),
    _broker("remote.log.index.file.cache.total.size.bytes", Type.LONG, 1073741824,
            "The size bound of the local cache of remote index files.", validator=at_least(1), group="tiered"),
    _broker("metrics.listener", Type.STRING, None,
            "Where the Prometheus metrics endpoint listens, e.g. http://127.0.0.1:9404 (served at /metrics; "
            "port 0 takes a free port, and the broker prints the bound address as 'tierlog metrics on URL'); "
            "off unless set.", importance=M, validator=HostPort(http=True), dynamic=False, group="operations"),
    _broker("console.listener", Type.STRING, None,
            "Where the read-only web console listens, e.g. http://127.0.0.1:9405 (port 0 takes a free port, "
            "and the broker prints the bound address as 'tierlog console on URL'); off unless set. It has no "
            "authentication of its own, like the metrics endpoint: bind it to a trusted address.",
            importance=M, validator=HostPort(http=True), dynamic=False, group="operations"),
    # Keys of Kafka's shipped server.properties (KRaft and ZooKeeper modes) that mean nothing to a
    # single-node broker: accepted and ignored, so switching a config over needs no edits.
    _compat("process.roles", Type.LIST, (), validator=one_of("broker", "controller")),
    _compat("controller.quorum.voters", Type.LIST, ()),
    _compat("controller.quorum.bootstrap.servers", Type.LIST, ()),
    _compat("controller.listener.names", Type.LIST, None),
    _compat("num.network.threads", Type.INT, 3, validator=at_least(1)),
    _compat("num.io.threads", Type.INT, 8, validator=at_least(1)),
    _compat("socket.send.buffer.bytes", Type.INT, 102400, validator=at_least(-1)),
    _compat("socket.receive.buffer.bytes", Type.INT, 102400, validator=at_least(-1)),
    _compat("default.replication.factor", Type.INT, 1, validator=at_least(1)),
    _compat("offsets.topic.replication.factor", Type.INT, 3, validator=at_least(1)),
    _compat("transaction.state.log.replication.factor", Type.INT, 3, validator=at_least(1)),
    _compat("transaction.state.log.min.isr", Type.INT, 2, validator=at_least(1)),
    _compat("share.coordinator.state.topic.replication.factor", Type.INT, 3, validator=at_least(1)),
    _compat("share.coordinator.state.topic.min.isr", Type.INT, 2, validator=at_least(1)),
    _compat("zookeeper.connect", Type.STRING, None),
    _compat("zookeeper.connection.timeout.ms", Type.INT, None, validator=at_least(0)),
]

#: The group of Kafka's keys that tierlog accepts, stores and describes but does not act on.
UNMODELLED_GROUP = "kafka"
_UNMODELLED_DOC = ("Apache Kafka's key, with Kafka's default: accepted, stored and described, so that tools "
                   "managing Kafka configs work; tierlog does not act on it.")
#: What such a key accepts: its type, as Kafka's checks are not tierlog's to repeat.
_UNMODELLED_VALID = {Type.INT: "any int (Kafka's own range is not checked)",
                     Type.LONG: "any long (Kafka's own range is not checked)",
                     Type.DOUBLE: "any double (Kafka's own range is not checked)"}
_KAFKA_TYPES = {"INT": Type.INT, "SHORT": Type.INT, "LONG": Type.LONG, "DOUBLE": Type.DOUBLE,
                "BOOLEAN": Type.BOOLEAN, "STRING": Type.STRING, "CLASS": Type.STRING, "LIST": Type.LIST,
                "PASSWORD": Type.PASSWORD}


def _kafka_default(type_: Type, text: str | None) -> Value:
    if text is None or text == "null" or type_ is Type.PASSWORD:
        return None
    if type_ is Type.INT or type_ is Type.LONG:
        return int(text)
    if type_ is Type.DOUBLE:
        return float(text)
    if type_ is Type.BOOLEAN:
        return text == "true"
    if type_ is Type.LIST:
        return tuple(item.strip() for item in text.split(",") if item.strip())
    return text


def _unmodelled(scope: str, defined: list[ConfigKey]) -> list[ConfigKey]:
    """Every key of Kafka's (config/kafka_keys.py) that tierlog does not define itself; a key tierlog
    comes to act on is defined above and drops out of here on its own."""
    known = {k.name for k in defined} | {a for k in defined for a in (*k.aliases, *k.deprecated_aliases)}
    out = []
    for key_scope, name, kafka_type, default, importance in KAFKA_KEYS:
        if key_scope != scope or name in known:
            continue
        type_ = _KAFKA_TYPES[kafka_type]
        out.append(ConfigKey(name=name, type=type_, default=_kafka_default(type_, default), doc=_UNMODELLED_DOC,
                             importance=Importance[importance], scope=Scope.TOPIC if scope == "topic" else Scope.BROKER,
                             valid_values=_UNMODELLED_VALID.get(type_, ""), dynamic=True, group=UNMODELLED_GROUP))
    return out


TOPIC_KEYS += _unmodelled("topic", TOPIC_KEYS)
BROKER_KEYS += _unmodelled("broker", BROKER_KEYS + SECURITY_KEYS + _synonym_keys())

TOPIC_DEF = ConfigDef(TOPIC_KEYS)
BROKER_DEF = ConfigDef(BROKER_KEYS + SECURITY_KEYS + _synonym_keys())

#: Network keys that, besides the security ones, Kafka takes per listener (``listener.name.<listener>.<key>``,
#: its SocketServer's ListenerReconfigurableConfigs that tierlog models), statically and dynamically.
LISTENER_NETWORK_KEYS = frozenset({"max.connection.creation.rate"})


def is_rsm_property(name: str) -> bool:
    """Plugin properties pass through unvalidated (the plugin validates them)."""
    return name.startswith(("rsm.config.", "rlmm.config."))
