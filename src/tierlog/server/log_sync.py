"""Keeping the logs on disk in step with the metadata image.

The metadata log is the truth about which topics exist and how they are configured; the log
manager follows it. At startup every log is checked against the image (a topic deleted, or deleted
and re-created under a new id, while the broker was down leaves a stale directory behind); after
each commit only what changed is applied: new partitions get their logs, removed topics lose
theirs, changed topic configs reach the open logs.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping

from tierlog.config import BrokerConfig
from tierlog.config.definition import Value, parse_value
from tierlog.config.keys import BROKER_DEF, TOPIC_DEF
from tierlog.config.log_config import LogConfig
from tierlog.errors import ConfigError, TierlogError
from tierlog.ids import uuid_to_base64
from tierlog.metadata import ConfigResourceType, Controller, MetadataDelta, MetadataImage
from tierlog.storage.checkpoints import PARTITION_METADATA, likely_damaged_copy
from tierlog.storage.log import UnifiedLog
from tierlog.storage.log_manager import LogManager

log = logging.getLogger(__name__)


def dynamic_broker_configs(image: MetadataImage, node_id: int) -> dict[str, str]:
    """Broker configs set through the admin API: this broker's own over the cluster-wide defaults."""
    return {**image.broker_configs(""), **image.broker_configs(str(node_id))}


def effective_topic_defaults(config: BrokerConfig, image: MetadataImage, node_id: int) -> dict[str, Value]:
    """The defaults of every topic key, with broker synonyms set dynamically (e.g. a cluster-wide
    ``log.retention.ms``) taking effect without a restart.

    Kafka's precedence: synonyms are tried most specific first (``log.retention.ms`` before
    ``log.retention.hours``), and the first one with a value anywhere -- this broker's dynamic
    config, the cluster-wide dynamic default, server.properties -- decides.
    """
    out = config.topic_defaults()
    dynamic = dynamic_broker_configs(image, node_id)
    if not dynamic:
        return out
    for name, key in TOPIC_DEF.keys.items():
        for syn, multiplier in key.broker_synonyms:
            if syn in dynamic:
                try:
                    value = parse_value(BROKER_DEF.require(syn), dynamic[syn])
                except ConfigError as e:
                    log.error("ignoring dynamic broker config %s: %s", syn, e)
                    continue
                if isinstance(value, int) and not isinstance(value, bool) and multiplier != 1 and value >= 0:
                    value *= multiplier
                out[name] = value
                break
            if config.is_set(syn):
                break
    return out


def topic_log_config(image: MetadataImage, topic: str, defaults: Mapping[str, Value]) -> LogConfig:
    """The effective LogConfig of ``topic``: its dynamic configs over the broker's defaults."""
    overrides = image.topic_configs(topic)
    if not overrides:
        return LogConfig.from_props({}, defaults)
    try:
        return LogConfig.from_props(dict(overrides), defaults)
    except (ConfigError, TypeError, ValueError) as e:
        # The controller validated these against the same definitions, so only a config written by
        # another version can land here; serving the topic on defaults beats not serving it.
        log.error("topic %s has configs this broker cannot apply (%s); using the defaults", topic, e)
        return LogConfig.from_props({}, defaults)


#: A topic restored from its logs keeps every record: its retention configs are lost with the
#: metadata, and the defaults could delete records older than a week at once.
RESTORED_TOPIC_CONFIGS = {"retention.ms": "-1", "retention.bytes": "-1"}


def restore_lost_topics(controller: Controller, log_manager: LogManager) -> list[str]:
    """After recovery cut records out of the metadata log: create again every topic that has logs on
    disk but is missing from the metadata (with the topic id its partition.metadata holds and as many
    partitions as its directories show), and grow a topic with logs beyond its partition count.
    Returns the topics restored. Their other configs are lost; the ERROR lines say so."""
    image = controller.image
    orphans: dict[str, dict[int, UnifiedLog]] = {}
    for (topic, partition), ulog in log_manager.all_logs().items():
        t = image.topics_by_name.get(topic)
        if t is None or partition not in t.partitions:
            orphans.setdefault(topic, {})[partition] = ulog
    restored: list[str] = []
    for topic, logs in sorted(orphans.items()):
        count = max(logs) + 1
        try:
            existing = image.topics_by_name.get(topic)
            if existing is not None:
                controller.create_partitions(topic, count)
                log.error("topic partitions restored topic=%s partitions=%d from its logs (%s): the damaged metadata "
                          "log lost them", topic, count, ", ".join(f"{topic}-{p}" for p in sorted(logs)))
            else:
                # The id most of its logs carry (an unreadable partition.metadata has none).
                ids = Counter(ulog.topic_id for ulog in logs.values() if ulog.topic_id is not None)
                topic_id = ids.most_common(1)[0][0] if ids else None
                controller.create_topic(topic, count, None, RESTORED_TOPIC_CONFIGS, topic_id=topic_id)
                log.error("topic restored topic=%s partitions=%d from its logs (%s): the damaged metadata log lost it; "
                          "its configs are lost too, so retention is off (retention.ms=-1, retention.bytes=-1) until "
                          "they are set again", topic, count, ", ".join(f"{topic}-{p}" for p in sorted(logs)))
        except TierlogError as e:
            log.error("could not restore topic %s from its logs (%s): its logs are kept, not served", topic, e)
            continue
        restored.append(topic)
    return restored


class LogSync:
    def __init__(self, log_manager: LogManager, image: Callable[[], MetadataImage]) -> None:
        self.log_manager = log_manager
        self._image = image
        self._last: MetadataImage | None = None

    def reconcile(self, image: MetadataImage, *, metadata_lost_records: bool = False) -> None:
        """Full pass (startup): drop logs of topics the image does not have, create missing ones.

        ``metadata_lost_records``: recovery cut records out of the metadata log, so a topic missing
        from the image may well exist; its logs are kept (and not served) rather than deleted."""
        for (topic, partition), ulog in self.log_manager.all_logs().items():
            t = image.topics_by_name.get(topic)
            if (t is not None and partition in t.partitions and ulog.topic_id is not None
                    and likely_damaged_copy(ulog.topic_id, t.topic_id)):
                # A flipped byte in partition.metadata, not a topic deleted and created again while
                # the broker was down: deleting the log for it would lose every record.
                log.error("partition metadata damaged topic=%s partition=%d (%s-%d): %s names topic id %s, a "
                          "few bits from the metadata's %s; rewriting it", topic, partition, topic, partition,
                          ulog.dir / PARTITION_METADATA, uuid_to_base64(ulog.topic_id), uuid_to_base64(t.topic_id))
                ulog.write_partition_metadata(t.topic_id)
                continue
            if t is None or partition not in t.partitions or (ulog.topic_id is not None and ulog.topic_id != t.topic_id):
                if metadata_lost_records:
                    log.error("keeping log topic=%s partition=%d (%s-%d) that the damaged metadata does not know: "
                              "not served until the topic is created again with this name (which takes the log "
                              "over) or a metadata snapshot is restored", topic, partition, topic, partition)
                    continue
                # A metadata snapshot restored from before the topic existed, or a topic deleted just
                # before a crash: the log is kept aside rather than deleted (Kafka's stray logs), so a
                # restore never costs data. A live topic deletion (on_commit) deletes.
                target = self.log_manager.stray_log(topic, partition)
                log.warning("stray log topic=%s partition=%d (%s-%d): its topic is not in the metadata; kept, not "
                            "served, as %s (delete it once it is not needed)", topic, partition, topic, partition,
                            target)
        for t in image.topics_by_id.values():
            for partition in t.partitions:
                if self.log_manager.refused_reason(t.name, partition) is not None:
                    continue  # logged at startup; its requests get the reason (KAFKA_STORAGE_ERROR)
                existing = self.log_manager.get_log(t.name, partition)
                if existing is None or existing.topic_id != t.topic_id:
                    self.log_manager.get_or_create_log(t.name, partition, t.topic_id)
        self._last = image

    def on_commit(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Controller listener: runs after each commit in the committing thread."""
        old = self._last if self._last is not None else delta.image
        self._last = image
        try:
            self._apply(old, image)
        except Exception:
            log.exception("applying metadata offset %d to the logs failed", image.provenance.last_offset)

    def _apply(self, old: MetadataImage, new: MetadataImage) -> None:
        for topic_id, t in old.topics_by_id.items():
            if topic_id not in new.topics_by_id:
                for partition in t.partitions:
                    self.log_manager.delete_log(t.name, partition)
        for topic_id, t in new.topics_by_id.items():
            before = old.topics_by_id.get(topic_id)
            if before is t:
                continue
            for partition in t.partitions:
                if before is None or partition not in before.partitions:
                    self.log_manager.get_or_create_log(t.name, partition, topic_id)
        if new.configs is not old.configs:
            changed = {name for (rtype, name) in set(new.configs) | set(old.configs)
                       if rtype == ConfigResourceType.TOPIC
                       and old.configs.get((rtype, name)) != new.configs.get((rtype, name))}
            broker_keys = {k for k in set(new.configs) | set(old.configs) if k[0] == ConfigResourceType.BROKER}
            if any(old.configs.get(k) != new.configs.get(k) for k in broker_keys):
                # A dynamic broker config may be a topic default: every topic may follow it.
                changed = set(new.topics_by_name)
            for name in changed:
                if name in new.topics_by_name:
                    self.log_manager.update_topic_config(name)
