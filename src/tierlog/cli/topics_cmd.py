"""``tierlog topics``: create, list, describe, alter and delete topics on a running broker, over the
Kafka protocol (CreateTopics, Metadata, DescribeConfigs, IncrementalAlterConfigs, CreatePartitions,
ListOffsets, DeleteTopics) — what ``kafka-topics.sh`` and ``kafka-configs.sh`` do for topics."""

from __future__ import annotations

import argparse
import struct
from typing import Any

from confluent_kafka import TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

from tierlog.cli._kafka import (
    AlterConfigOpType,
    CliError,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    add_connection_options,
    admin_client,
    command,
    fail,
    offset_spec,
    parse_pairs,
    result,
    results,
)
from tierlog.cli._table import json_lines, render, write
from tierlog.ids import uuid_to_base64

# Kafka's ConfigSource names, shortened the way kafka-configs.sh prints them.
_SOURCE_NAMES = {
    ConfigSource.DYNAMIC_TOPIC_CONFIG.value: "topic",
    ConfigSource.DYNAMIC_BROKER_CONFIG.value: "broker",
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value: "cluster",
    ConfigSource.STATIC_BROKER_CONFIG.value: "server.properties",
    ConfigSource.DEFAULT_CONFIG.value: "default",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics on a running broker",
                       description="Manage the topics of a running broker over the Kafka protocol.")
    tsub = p.add_subparsers(dest="topics_command", metavar="ACTION")
    tsub.required = True

    create = tsub.add_parser("create", help="create a topic", description="Create a topic.")
    create.add_argument("name", help="the topic")
    create.add_argument("--partitions", type=int, default=1, help="number of partitions (default 1)")
    create.add_argument("--replication-factor", type=int, default=1,
                        help="replicas per partition (default 1; a single broker has one)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic config, e.g. retention.ms=86400000 (repeatable)")
    create.add_argument("--if-not-exists", action="store_true", help="succeed when the topic already exists")
    add_connection_options(create)
    create.set_defaults(func=run_create)

    lst = tsub.add_parser("list", help="list topics", description="List topics with their partition counts.")
    lst.add_argument("--include-internal", action="store_true", help="also list __consumer_offsets")
    lst.add_argument("--json", action="store_true", help="one JSON object per topic")
    add_connection_options(lst)
    lst.set_defaults(func=run_list)

    describe = tsub.add_parser("describe", help="partitions, leaders, offsets and non-default configs",
                               description="Describe topics (all when none is named): topic id, each "
                                           "partition's leader, replicas, in-sync replicas, log start and end "
                                           "offsets, and every config whose value is not the default, with "
                                           "where it is set.")
    describe.add_argument("names", nargs="*", metavar="NAME", help="topics to describe (default: all)")
    describe.add_argument("--json", action="store_true", help="one JSON object per topic")
    add_connection_options(describe)
    describe.set_defaults(func=run_describe)

    alter = tsub.add_parser("alter", help="change a topic's configs or add partitions",
                            description="Set or remove topic configs (IncrementalAlterConfigs; the other "
                                        "configs stay) and grow the partition count (CreatePartitions).")
    alter.add_argument("name", help="the topic")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                       help="set a topic config (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                       help="remove a topic config, back to the broker's default (repeatable)")
    alter.add_argument("--partitions", type=int, help="the new, larger, partition count")
    add_connection_options(alter)
    alter.set_defaults(func=run_alter)

    delete = tsub.add_parser("delete", help="delete topics", description="Delete topics and their data.")
    delete.add_argument("names", nargs="+", metavar="NAME", help="topics to delete")
    delete.add_argument("--if-exists", action="store_true", help="succeed for topics that do not exist")
    add_connection_options(delete)
    delete.set_defaults(func=run_delete)


@command
def run_create(args: argparse.Namespace) -> int:
    configs = parse_pairs(args.config, "--config")
    if args.partitions < 1:
        raise CliError("--partitions must be at least 1")
    admin = admin_client(args)
    futures = admin.create_topics([NewTopic(args.name, num_partitions=args.partitions,
                                            replication_factor=args.replication_factor, config=configs)],
                                  request_timeout=args.timeout)
    try:
        result(futures[args.name], args, f"cannot create topic {args.name}")
    except CliError as e:
        if args.if_not_exists and "TOPIC_ALREADY_EXISTS" in str(e):
            write(f"topic {args.name} already exists\n")
            return 0
        raise
    settings = "".join(f", {k}={v}" for k, v in sorted(configs.items()))
    write(f"created topic {args.name} with {args.partitions} partition{'s' if args.partitions != 1 else ''}"
          f"{settings}\n")
    return 0


@command
def run_list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    metadata = admin.list_topics(timeout=args.timeout)
    topics = sorted((name, len(t.partitions)) for name, t in metadata.topics.items()
                    if args.include_internal or not name.startswith("__"))
    if args.json:
        write(json_lines({"topic": name, "partitions": count} for name, count in topics))
    else:
        write(render(("TOPIC", "PARTITIONS"), topics))
    return 0


def _offsets(admin: AdminClient, args: argparse.Namespace, partitions: list[TopicPartition],
             spec: OffsetSpec) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    futures = admin.list_offsets({tp: spec for tp in partitions}, request_timeout=args.timeout)
    values, failures = results(futures, args, lambda tp: f"cannot list offsets of {tp.topic}-{tp.partition}")
    if failures:
        raise CliError(failures[0])
    return {(tp.topic, tp.partition): int(info.offset) for tp, info in values.items()}


def non_default_configs(admin: AdminClient, args: argparse.Namespace, topics: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Per topic, each config not at its default: name, value and source."""
    resources = {ConfigResource(ConfigResource.Type.TOPIC, t): t for t in topics}
    if not resources:
        return {}
    futures = admin.describe_configs(list(resources), request_timeout=args.timeout)
    values, failures = results(futures, args, lambda r: f"cannot describe configs of {r.name}")
    if failures:
        raise CliError(failures[0])
    out: dict[str, list[dict[str, Any]]] = {}
    for resource, entries in values.items():
        out[resources[resource]] = [
            {"name": e.name, "value": e.value, "source": _SOURCE_NAMES.get(e.source, str(e.source))}
            for e in sorted(entries.values(), key=lambda e: e.name)
            if e.source != ConfigSource.DEFAULT_CONFIG.value]
    return out


@command
def run_describe(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    names = list(dict.fromkeys(args.names)) or sorted(
        n for n in admin.list_topics(timeout=args.timeout).topics if not n.startswith("__"))
    if not names:
        write("no topics\n")
        return 0
    futures = admin.describe_topics(TopicCollection(names), request_timeout=args.timeout)
    described, failures = results(futures, args, lambda name: f"cannot describe topic {name}")
    found = [n for n in names if n in described]
    configs = non_default_configs(admin, args, found)
    tps = [TopicPartition(n, p.id) for n in found for p in described[n].partitions]
    earliest = _offsets(admin, args, tps, offset_spec("earliest"))
    latest = _offsets(admin, args, tps, offset_spec("latest"))
    topics = []
    for name in found:
        d = described[name]
        topics.append({
            "topic": name, "topic_id": _kafka_uuid(d.topic_id), "partitions": [{
                "partition": p.id, "leader": p.leader.id if p.leader is not None else None,
                "replicas": [r.id for r in p.replicas], "isr": [r.id for r in p.isr],
                "log_start_offset": earliest.get((name, p.id)), "log_end_offset": latest.get((name, p.id)),
            } for p in sorted(d.partitions, key=lambda p: p.id)],
            "configs": configs.get(name, [])})
    if args.json:
        write(json_lines(topics))
    else:
        write("\n".join(_describe_text(t) for t in topics))
    for message in failures:
        fail(message)
    return 1 if failures else 0


def _kafka_uuid(topic_id: Any) -> str:
    """Kafka's spelling of a topic id (URL-safe base64 without padding, as kafka-topics.sh and
    `tierlog metadata show` print it); librdkafka's str() uses the standard alphabet."""
    msb, lsb = topic_id.get_most_significant_bits(), topic_id.get_least_significant_bits()
    return uuid_to_base64(struct.pack(">qq", msb, lsb))


def _describe_text(topic: dict[str, Any]) -> str:
    parts = topic["partitions"]
    lines = [f"Topic: {topic['topic']}  TopicId: {topic['topic_id']}  Partitions: {len(parts)}"]
    configs = topic["configs"]
    if configs:
        lines.append("Configs (not default):")
        lines += [f"  {c['name']}={c['value']}" + ("" if c["source"] == "topic" else f"  (from {c['source']})")
                  for c in configs]
    else:
        lines.append("Configs: all defaults")
    table = render(("PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOG-END"), [
        (p["partition"], p["leader"], ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])),
         p["log_start_offset"], p["log_end_offset"]) for p in parts])
    return "\n".join(lines) + "\n" + table


@command
def run_alter(args: argparse.Namespace) -> int:
    sets = parse_pairs(args.config, "--config")
    deletes = list(dict.fromkeys(args.delete_config))
    if not sets and not deletes and args.partitions is None:
        raise CliError("nothing to change: give --config, --delete-config or --partitions")
    both = sorted(set(sets) & set(deletes))
    if both:
        raise CliError(f"{both[0]} is both set and deleted")
    admin = admin_client(args)
    done: list[str] = []
    if sets or deletes:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
        resource = ConfigResource(ConfigResource.Type.TOPIC, args.name, incremental_configs=entries)
        altered = admin.incremental_alter_configs([resource], request_timeout=args.timeout)
        result(altered[resource], args, f"cannot alter configs of topic {args.name}")
        done += [f"set {k}={v}" for k, v in sets.items()] + [f"deleted {k}" for k in deletes]
    if args.partitions is not None:
        futures = admin.create_partitions([NewPartitions(args.name, args.partitions)], request_timeout=args.timeout)
        result(futures[args.name], args, f"cannot grow topic {args.name} to {args.partitions} partitions")
        done.append(f"partitions now {args.partitions}")
    write(f"altered topic {args.name}: {'; '.join(done)}\n")
    return 0


@command
def run_delete(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    names = list(dict.fromkeys(args.names))
    futures = admin.delete_topics(names, request_timeout=args.timeout, operation_timeout=args.timeout)
    deleted, failures = results(futures, args, lambda name: f"cannot delete topic {name}")
    if args.if_exists:
        failures = [f for f in failures if "UNKNOWN_TOPIC" not in f]
    for name in names:
        if name in deleted:
            write(f"deleted topic {name}\n")
    for message in failures:
        fail(message)
    return 1 if failures else 0
