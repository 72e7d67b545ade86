"""Every configuration key tierlog understands, defined once.

Topic keys name the broker keys that set their defaults (Kafka's synonyms); broker keys that are
only such defaults are defined here too, so a ``server.properties`` written for Kafka validates.
"""

from __future__ import annotations

from tierlog.config.definition import (
    INT32_MAX,
    INT64_MAX,
    ConfigDef,
    ConfigKey,
    Importance,
    Scope,
    Type,
    Validator,
    Value,
    at_least,
    between,
    one_of,
)

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
            group: str = "broker") -> ConfigKey:
    return ConfigKey(name=name, type=type_, default=default, doc=doc, importance=importance,
                     scope=Scope.BROKER, validator=validator, valid_values=valid, internal=internal,
                     dynamic=dynamic, group=group)


TOPIC_KEYS: list[ConfigKey] = [
    _topic("segment.bytes", Type.INT, 1073741824, "The size at which a segment is rolled.",
           importance=H, validator=at_least(14), valid="[14,...]", synonyms=(("log.segment.bytes", 1),)),
    _topic("segment.ms", Type.LONG, 604800000, "The time after which a segment is rolled even if not full.",
           validator=at_least(1), valid="[1,...]",
           synonyms=(("log.roll.ms", 1), ("log.roll.hours", HOUR_MS))),
    _topic("segment.jitter.ms", Type.LONG, 0, "The maximum random jitter subtracted from segment.ms per segment.",
           validator=at_least(0), valid="[0,...]",
           synonyms=(("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", HOUR_MS))),
    _topic("segment.index.bytes", Type.INT, 10485760, "The preallocated size of the offset and time index files.",
           validator=at_least(4), valid="[4,...]", synonyms=(("log.index.size.max.bytes", 1),)),
    _topic("index.interval.bytes", Type.INT, 4096, "Bytes of log between two offset index entries.",
           validator=at_least(0), valid="[0,...]", synonyms=(("log.index.interval.bytes", 1),)),
    _topic("retention.ms", Type.LONG, 604800000,
           "How long a segment is kept after its largest timestamp; -1 keeps it forever.",
           importance=H, validator=at_least(-1), valid="[-1,...]",
           synonyms=(("log.retention.ms", 1), ("log.retention.minutes", MINUTE_MS), ("log.retention.hours", HOUR_MS))),
    _topic("retention.bytes", Type.LONG, -1, "The maximum size of a partition's log; -1 is unbounded.",
           importance=H, synonyms=(("log.retention.bytes", 1),)),
    _topic("log.retention.min.timestamp", Type.LONG, 0,
           "Timestamp floor (seed 004, KIP-47), Unix ms: every leading segment whose largest timestamp is below "
           "it is deleted. 0 turns it off.",
           importance=H, validator=at_least(0), valid="[0,...]", aliases=("retention.min.timestamp",),
           synonyms=(("log.retention.min.timestamp", 1),)),
    _topic("file.delete.delay.ms", Type.LONG, 60000, "How long a deleted segment's files wait before removal.",
           validator=at_least(0), valid="[0,...]", synonyms=(("log.segment.delete.delay.ms", 1),)),
    _topic("preallocate", Type.BOOLEAN, False, "Preallocate segment files at segment.bytes.",
           synonyms=(("log.preallocate", 1),)),
    _topic("cleanup.policy", Type.LIST, ("delete",), "delete, compact, or both.",
           validator=one_of("delete", "compact"), valid="[delete, compact]",
           synonyms=(("log.cleanup.policy", 1),)),
    _topic("max.message.bytes", Type.INT, 1048588, "The largest record batch the log accepts.",
           importance=M, validator=at_least(0), valid="[0,...]", synonyms=(("message.max.bytes", 1),)),
    _topic("message.timestamp.type", Type.STRING, "CreateTime", "CreateTime or LogAppendTime.",
           validator=one_of("CreateTime", "LogAppendTime"), valid="[CreateTime, LogAppendTime]",
           synonyms=(("log.message.timestamp.type", 1),)),
    _topic("flush.messages", Type.LONG, INT64_MAX, "Force an fsync after this many messages.",
           validator=at_least(1), valid="[1,...]", synonyms=(("log.flush.interval.messages", 1),)),
    _topic("flush.ms", Type.LONG, INT64_MAX, "Force an fsync when the oldest unflushed data is this old.",
           validator=at_least(0), valid="[0,...]", synonyms=(("log.flush.interval.ms", 1),)),
    _topic("compression.type", Type.STRING, "producer",
           "Codec the log stores: producer (keep the producer's), uncompressed, gzip, snappy, lz4, zstd.",
           validator=one_of("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"),
           valid="[producer, uncompressed, gzip, snappy, lz4, zstd]", synonyms=(("compression.type", 1),)),
    _topic("min.insync.replicas", Type.INT, 1, "Accepted for compatibility; a single node is always in sync.",
           validator=at_least(1), valid="[1,...]", synonyms=(("min.insync.replicas", 1),)),
    _topic("remote.storage.enable", Type.BOOLEAN, False, "Copy closed segments of this topic to the remote tier.",
           importance=M, group="tiered"),
    _topic("local.retention.ms", Type.LONG, -2,
           "How long local copies of tiered segments are kept; -2 means retention.ms.",
           validator=at_least(-2), valid="[-2,...]", synonyms=(("log.local.retention.ms", 1),), group="tiered"),
    _topic("local.retention.bytes", Type.LONG, -2,
           "Local size bound when tiering; -2 means retention.bytes.",
           validator=at_least(-2), valid="[-2,...]", synonyms=(("log.local.retention.bytes", 1),), group="tiered"),
    _topic("message.timestamp.before.max.ms", Type.LONG, INT64_MAX,
           "How far in the past a CreateTime timestamp may be.", validator=at_least(0),
           synonyms=(("log.message.timestamp.before.max.ms", 1),)),
    _topic("message.timestamp.after.max.ms", Type.LONG, INT64_MAX,
           "How far in the future a CreateTime timestamp may be.", validator=at_least(0),
           synonyms=(("log.message.timestamp.after.max.ms", 1),)),
]

# Broker keys that exist only as defaults for topic keys (Kafka's synonyms).
_SYNONYM_DEFAULTS: dict[str, Value] = {
    "log.roll.hours": 168,
    "log.retention.hours": 168,
    "log.roll.jitter.hours": 0,
}


def _synonym_keys() -> list[ConfigKey]:
    out: list[ConfigKey] = []
    seen: set[str] = set()
    for topic_key in TOPIC_KEYS:
        for syn, mult in topic_key.broker_synonyms:
            if syn in seen:
                continue
            seen.add(syn)
            default = _SYNONYM_DEFAULTS.get(syn, topic_key.default if len(topic_key.broker_synonyms) == 1 else None)
            unit = {1: "", MINUTE_MS: " (minutes)", HOUR_MS: " (hours)"}[mult]
            out.append(ConfigKey(
                name=syn, type=Type.LONG if topic_key.type in (Type.INT, Type.LONG) and mult != 1 else topic_key.type,
                default=default,
                doc=f"Broker default for topic key {topic_key.name}{unit}.", importance=topic_key.importance,
                scope=Scope.BROKER, validator=topic_key.validator if mult == 1 else at_least(-1),
                valid_values=topic_key.valid_values, dynamic=True, group="log"))
    return out


BROKER_KEYS: list[ConfigKey] = [
    _broker("node.id", Type.INT, 1, "This broker's id.", importance=H, validator=at_least(0)),
    _broker("broker.id", Type.INT, None, "Alias of node.id accepted for old configs.", validator=at_least(0)),
    _broker("listeners", Type.LIST, ("PLAINTEXT://127.0.0.1:9092",), "Where the broker listens.", importance=H),
    _broker("advertised.listeners", Type.LIST, None, "Listeners advertised to clients; defaults to listeners."),
    _broker("log.dirs", Type.LIST, None, "Log directories; defaults to log.dir.", importance=H),
    _broker("log.dir", Type.STRING, "./tierlog-data", "The log directory used when log.dirs is not set.",
            importance=H),
    _broker("num.partitions", Type.INT, 1, "Partitions of an auto-created topic.", validator=at_least(1)),
    _broker("auto.create.topics.enable", Type.BOOLEAN, True, "Create unknown topics on metadata requests."),
    _broker("sanity.check.all.logs.enabled", Type.BOOLEAN, True,
            "Seed 003 (KIP-263): sanity-check every segment's indexes at startup. When false and the shutdown "
            "was clean, only each partition's active segment is checked; the rest are checked lazily.",
            importance=H, group="log"),
    _broker("log.retention.check.interval.ms", Type.LONG, 300000, "How often retention runs.",
            validator=at_least(1), group="log"),
    _broker("log.flush.scheduler.interval.ms", Type.LONG, INT64_MAX, "How often logs are checked for flush.ms.",
            validator=at_least(1), group="log"),
    _broker("log.flush.offset.checkpoint.interval.ms", Type.INT, 60000,
            "How often the recovery point is checkpointed.", validator=at_least(0), group="log"),
    _broker("log.flush.start.offset.checkpoint.interval.ms", Type.INT, 60000,
            "How often the log start offset is checkpointed.", validator=at_least(0), group="log"),
    _broker("log.lazy.check.interval.ms", Type.LONG, 1000,
            "How often the background checker of seed 003 checks a batch of unchecked segments.",
            validator=at_least(1), group="log"),
    _broker("num.recovery.threads.per.data.dir", Type.INT, 1, "Threads that load logs at startup.",
            validator=at_least(1), group="log"),
    _broker("producer.id.expiration.ms", Type.INT, 86400000,
            "A producer with no batch newer than this is forgotten (also the seed 001 replay window).",
            validator=at_least(1), dynamic=True, group="producer"),
    _broker("producer.id.expiration.check.interval.ms", Type.INT, 600000,
            "How often expired producers are removed.", validator=at_least(1), internal=True, group="producer"),
    _broker("metadata.log.max.record.bytes.between.snapshots", Type.LONG, 20971520,
            "Bytes appended to the metadata log after which a snapshot is taken.", validator=at_least(1),
            group="metadata", dynamic=True),
    _broker("metadata.log.max.snapshot.interval.ms", Type.LONG, 3600000,
            "Seed 000 (KIP-876): take a snapshot when a record not in the latest snapshot is older than this; "
            "0 disables time-based snapshots.", importance=H, validator=at_least(0), group="metadata", dynamic=True),
    _broker("metadata.max.retention.bytes", Type.LONG, 104857600,
            "Soft bound on metadata log plus snapshots; the newest snapshot is always kept.", group="metadata", dynamic=True),
    _broker("metadata.max.retention.ms", Type.LONG, 604800000,
            "Snapshots older than this are deleted; the newest snapshot is always kept.", group="metadata", dynamic=True),
    _broker("metadata.log.segment.bytes", Type.INT, 1073741824, "Segment size of the metadata log.",
            validator=at_least(12), group="metadata"),
    _broker("metadata.log.segment.ms", Type.LONG, 604800000, "Roll time of the metadata log.",
            validator=at_least(1), group="metadata"),
    _broker("socket.request.max.bytes", Type.INT, 104857600, "The largest request frame accepted.",
            validator=at_least(1), group="network"),
    _broker("max.connections", Type.INT, INT32_MAX, "The most client connections at once.",
            validator=at_least(0), group="network"),
    _broker("connections.max.idle.ms", Type.LONG, 600000, "Idle connections are closed after this.",
            validator=at_least(1), group="network"),
    _broker("group.initial.rebalance.delay.ms", Type.INT, 3000, "Delay before the first rebalance of a new group.",
            validator=at_least(0), group="groups"),
    _broker("group.min.session.timeout.ms", Type.INT, 6000, "Smallest allowed session timeout.", group="groups"),
    _broker("group.max.session.timeout.ms", Type.INT, 1800000, "Largest allowed session timeout.", group="groups"),
    _broker("offsets.topic.num.partitions", Type.INT, 50, "Partitions of __consumer_offsets.",
            validator=between(1, 10000), group="groups"),
    _broker("remote.log.storage.system.enable", Type.BOOLEAN, False, "Enable tiered storage on this broker.",
            importance=H, group="tiered"),
    _broker("remote.log.storage.manager.class.name", Type.STRING,
            "tierlog.tiered.backends.local.LocalDirectoryRemoteStorageManager",
            "Dotted path of the RemoteStorageManager plugin.", group="tiered"),
    _broker("remote.log.storage.manager.impl.prefix", Type.STRING, "rsm.config.",
            "Prefix of properties handed to the RemoteStorageManager.", group="tiered"),
    _broker("remote.log.metadata.custom.metadata.max.bytes", Type.INT, 128,
            "Seed 002 (KIP-917): largest custom metadata a plugin may return; above it the copy is undone "
            "and that partition's copy task stops with an error.", importance=H, validator=at_least(0),
            group="tiered"),
    _broker("remote.log.manager.task.interval.ms", Type.LONG, 30000, "How often copy and expiry passes run.",
            validator=at_least(1), group="tiered"),
    _broker("remote.log.index.file.cache.total.size.bytes", Type.LONG, 1073741824,
            "Bound of the cache of remote indexes.", validator=at_least(1), group="tiered"),
    _broker("metrics.listener", Type.STRING, None, "host:port of the Prometheus endpoint; off unless set.",
            group="operations"),
]

TOPIC_DEF = ConfigDef(TOPIC_KEYS)
BROKER_DEF = ConfigDef(BROKER_KEYS + _synonym_keys())


def is_rsm_property(name: str) -> bool:
    """Plugin properties pass through unvalidated (the plugin validates them)."""
    return name.startswith(("rsm.config.", "rlmm.config."))
