"""The metadata image as readable text tables (what ``tierlog metadata show`` prints), in the spirit
of Kafka's metadata shell: features, brokers, producer ids, topics, partitions, configs."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from tierlog.ids import uuid_to_base64
from tierlog.metadata.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from tierlog.metadata.features import metadata_version_name
from tierlog.metadata.image import METADATA_VERSION_FEATURE, MetadataImage
from tierlog.metadata.records import ConfigResourceType


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return lines


def _when(ms: int) -> str:
    if ms < 0:
        return "unknown"
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


def _ints(values: Sequence[int]) -> str:
    return "[" + ",".join(str(v) for v in values) + "]"


def _enum_name(kind: type[ResourceType | PatternType | AclOperation | AclPermissionType], value: int) -> str:
    try:
        return kind(value).name
    except ValueError:
        return str(value)


def render_image(image: MetadataImage, *, topics: Sequence[str] | None = None) -> str:
    """The whole image; ``topics`` limits the topic, partition and topic-config tables."""
    p = image.provenance
    out = [
        f"Metadata image: offsets < {p.end_offset} (last offset {p.last_offset}, epoch {p.last_epoch}, "
        f"last record appended {_when(p.last_append_time_ms)})",
        "",
        f"Features ({len(image.features)}; finalized features epoch {image.features_epoch})",
    ]
    out += table(["NAME", "LEVEL", "VERSION"],
                 [(n, image.features[n], metadata_version_name(image.features[n]) if n == METADATA_VERSION_FEATURE else "-")
                  for n in sorted(image.features)])
    out += ["", f"Brokers ({len(image.brokers)})"]
    out += table(
        ["ID", "EPOCH", "INCARNATION", "RACK", "FENCED", "ENDPOINTS"],
        [(b.broker_id, b.broker_epoch, uuid_to_base64(b.incarnation_id), b.rack or "-", str(b.fenced).lower(),
          ",".join(f"{e.name}://{e.host}:{e.port}" for e in b.endpoints) or "-")
         for b in (image.brokers[i] for i in sorted(image.brokers))],
    )
    pid = image.producer_ids
    out += ["", "Producer ids",
            f"  next producer id {pid.next_producer_id} (last block to broker {pid.last_broker_id}, "
            f"broker epoch {pid.last_broker_epoch})"]
    wanted = set(topics) if topics is not None else None
    selected = [t for name, t in sorted(image.topics_by_name.items()) if wanted is None or name in wanted]
    out += ["", f"Topics ({len(selected)} of {len(image.topics_by_name)})"]
    out += table(["NAME", "TOPIC ID", "PARTITIONS"], [(t.name, t.topic_id_string, t.num_partitions) for t in selected])
    out += ["", f"Partitions ({sum(t.num_partitions for t in selected)})"]
    out += table(
        ["TOPIC", "PARTITION", "LEADER", "LEADER EPOCH", "PARTITION EPOCH", "REPLICAS", "ISR"],
        [(t.name, q.partition_id, q.leader, q.leader_epoch, q.partition_epoch, _ints(q.replicas), _ints(q.isr))
         for t in selected for q in (t.partitions[i] for i in sorted(t.partitions))],
    )
    topic_rows = [
        (name, k, v)
        for (rtype, name), cfg in sorted(image.configs.items())
        if rtype == ConfigResourceType.TOPIC and (wanted is None or name in wanted)
        for k, v in sorted(cfg.items())
    ]
    out += ["", f"Topic configs ({len(topic_rows)})"]
    out += table(["TOPIC", "NAME", "VALUE"], topic_rows)
    broker_rows = [
        (name or "<default>", k, v)
        for (rtype, name), cfg in sorted(image.configs.items())
        if rtype == ConfigResourceType.BROKER
        for k, v in sorted(cfg.items())
    ]
    out += ["", f"Broker configs ({len(broker_rows)})"]
    out += table(["BROKER", "NAME", "VALUE"], broker_rows)
    group_rows = [(name, k, v) for (rtype, name), cfg in sorted(image.configs.items())
                  if rtype == ConfigResourceType.GROUP for k, v in sorted(cfg.items())]
    if group_rows:
        out += ["", f"Group configs ({len(group_rows)})"]
        out += table(["GROUP", "NAME", "VALUE"], group_rows)
    out += ["", f"ACLs ({len(image.acls)})"]
    out += table(["ID", "RESOURCE TYPE", "PATTERN", "RESOURCE", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
                 sorted((uuid_to_base64(a.id), _enum_name(ResourceType, a.resource_type),
                         _enum_name(PatternType, a.pattern_type), a.resource_name, a.principal, a.host,
                         _enum_name(AclOperation, a.operation), _enum_name(AclPermissionType, a.permission_type))
                        for a in image.acls.values()))
    return "\n".join(out) + "\n"
