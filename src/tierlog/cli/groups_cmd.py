"""``tierlog groups``: list and describe consumer groups with their lag, reset a group's committed
offsets and delete some of them — what ``kafka-consumer-groups.sh`` does, over ListGroups,
DescribeGroups, OffsetFetch, ListOffsets, OffsetCommit and OffsetDelete. Resetting is a dry run
unless ``--execute`` is given."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from tierlog.cli._kafka import (
    CliError,
    ConsumerGroupDescription,
    OffsetSpec,
    add_connection_options,
    admin_client,
    command,
    offset_spec,
    result,
    results,
)
from tierlog.cli._table import json_lines, render, write

# Kafka's names of the group states (librdkafka's enum spells them differently).
_STATE_NAMES = {"UNKNOWN": "Unknown", "PREPARING_REBALANCING": "PreparingRebalance",
                "COMPLETING_REBALANCING": "CompletingRebalance", "STABLE": "Stable", "DEAD": "Dead",
                "EMPTY": "Empty"}
#: States in which no member owns the offsets, so an administrator may rewrite them.
_INACTIVE = {"Empty", "Dead", "Unknown"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("groups", help="list, describe and reset consumer groups",
                       description="Consumer groups of a running broker: list them, show members, committed "
                                   "offsets and lag, and reset committed offsets.")
    gsub = p.add_subparsers(dest="groups_command", metavar="ACTION")
    gsub.required = True

    lst = gsub.add_parser("list", help="list consumer groups", description="List consumer groups and their states.")
    lst.add_argument("--json", action="store_true", help="one JSON object per group")
    add_connection_options(lst)
    lst.set_defaults(func=run_list)

    describe = gsub.add_parser("describe", help="members, committed offsets and lag of groups",
                               description="Per partition the group committed or is assigned: the committed "
                                           "offset, the log end offset, the lag between them, and the member "
                                           "that owns it.")
    describe.add_argument("groups", nargs="+", metavar="GROUP", help="the groups to describe")
    describe.add_argument("--json", action="store_true", help="one JSON object per group")
    add_connection_options(describe)
    describe.set_defaults(func=run_describe)

    reset = gsub.add_parser("reset-offsets", help="move a group's committed offsets (dry run unless --execute)",
                            description="Compute new committed offsets for a group and print them; with "
                                        "--execute, commit them. The group must have no active members. "
                                        "--to-offset is kept within each partition's log start and end.")
    reset.add_argument("group", help="the group")
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, optionally only some partitions (repeatable)")
    which.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets for")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    to.add_argument("--to-timestamp", type=int, metavar="MS",
                    help="the first offset with a timestamp at or after MS (the end when there is none)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only print them (the default)")
    reset.add_argument("--json", action="store_true", help="one JSON object per partition")
    add_connection_options(reset)
    reset.set_defaults(func=run_reset)

    delete = gsub.add_parser("delete-offsets", help="delete a group's committed offsets of a topic",
                             description="Delete the committed offsets of a group for a topic (all its partitions, "
                                         "or those given with --partition), over OffsetDelete. As in Kafka, a "
                                         "topic the group's members subscribe to is refused "
                                         "(GROUP_SUBSCRIBED_TO_TOPIC).")
    delete.add_argument("group", help="the group")
    delete.add_argument("--topic", required=True, help="the topic")
    delete.add_argument("--partition", type=int, action="append", metavar="P",
                        help="only this partition (repeatable)")
    delete.add_argument("--json", action="store_true", help="one JSON object per partition")
    add_connection_options(delete)
    delete.set_defaults(func=run_delete_offsets)


def _state(state: Any) -> str:
    name = getattr(state, "name", str(state))
    return _STATE_NAMES.get(name, name)


@command
def run_list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    listed = result(admin.list_consumer_groups(request_timeout=args.timeout), args, "cannot list groups")
    for error in listed.errors:
        print(f"warning: {error}", file=sys.stderr)
    rows = sorted((g.group_id, _state(g.state)) for g in listed.valid)
    if args.json:
        write(json_lines({"group": g, "state": s} for g, s in rows))
    else:
        write(render(("GROUP", "STATE"), rows))
    return 0


def _committed(admin: AdminClient, args: argparse.Namespace, group: str,
               partitions: list[TopicPartition] | None = None) -> dict[tuple[str, int], int]:
    request = ConsumerGroupTopicPartitions(group, partitions)
    futures = admin.list_consumer_group_offsets([request], request_timeout=args.timeout)
    answer = result(futures[group], args, f"cannot fetch the committed offsets of group {group}")
    return {(tp.topic, tp.partition): int(tp.offset) for tp in answer.topic_partitions if tp.offset >= 0}


def _log_offsets(admin: AdminClient, args: argparse.Namespace, partitions: list[tuple[str, int]],
                 spec: OffsetSpec) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions}, request_timeout=args.timeout)
    values, failures = results(futures, args, lambda tp: f"cannot list offsets of {tp.topic}-{tp.partition}")
    if failures:
        raise CliError(failures[0])
    return {(tp.topic, tp.partition): int(info.offset) for tp, info in values.items()}


def _describe_group(admin: AdminClient, args: argparse.Namespace, group: str) -> ConsumerGroupDescription:
    futures = admin.describe_consumer_groups([group], request_timeout=args.timeout)
    described: ConsumerGroupDescription = result(futures[group], args, f"cannot describe group {group}")
    return described


@command
def run_describe(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    out: list[dict[str, Any]] = []
    for group in dict.fromkeys(args.groups):
        described = _describe_group(admin, args, group)
        committed = _committed(admin, args, group)
        state = _state(described.state)
        if state == "Dead" and not committed:
            raise CliError(f"consumer group {group} does not exist")
        owners: dict[tuple[str, int], Any] = {}
        for member in described.members:
            for owned in member.assignment.topic_partitions if member.assignment else []:
                owners[(owned.topic, owned.partition)] = member
        partitions = sorted(set(committed) | set(owners))
        ends = _log_offsets(admin, args, partitions, offset_spec("latest"))
        rows = []
        for tp in partitions:
            current, end, owner = committed.get(tp), ends.get(tp), owners.get(tp)
            rows.append({
                "topic": tp[0], "partition": tp[1], "current_offset": current, "log_end_offset": end,
                "lag": None if current is None or end is None else max(end - current, 0),
                "consumer_id": owner.member_id if owner else None,
                "host": owner.host if owner else None, "client_id": owner.client_id if owner else None})
        out.append({"group": group, "state": state, "members": len(described.members),
                    "assignor": described.partition_assignor or None, "partitions": rows})
    if args.json:
        write(json_lines(out))
        return 0
    texts = []
    for g in out:
        head = f"Group: {g['group']}  State: {g['state']}  Members: {g['members']}"
        if g["assignor"]:
            head += f"  Assignor: {g['assignor']}"
        table = render(("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                        "CLIENT-ID"),
                       [(r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
                         r["consumer_id"], r["host"], r["client_id"]) for r in g["partitions"]])
        texts.append(head + "\n" + (table if g["partitions"] else "no committed offsets and no assignment\n"))
    write("\n".join(texts))
    return 0


def _reset_partitions(admin: AdminClient, args: argparse.Namespace,
                      committed: dict[tuple[str, int], int]) -> list[tuple[str, int]]:
    if args.all_topics:
        if not committed:
            raise CliError(f"group {args.group} has no committed offsets")
        return sorted(committed)
    metadata = admin.list_topics(timeout=args.timeout)
    out: list[tuple[str, int]] = []
    for item in args.topic:
        name, _, parts = item.partition(":")
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            raise CliError(f"topic {name} does not exist")
        if parts:
            try:
                chosen = [int(p) for p in parts.split(",")]
            except ValueError:
                raise CliError(f"--topic {item!r}: partitions must be numbers, as TOPIC:0,1") from None
            missing = [p for p in chosen if p not in topic.partitions]
            if missing:
                raise CliError(f"topic {name} has no partition {missing[0]}")
        else:
            chosen = sorted(topic.partitions)
        out += [(name, p) for p in chosen]
    return list(dict.fromkeys(out))


@command
def run_reset(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    group = args.group
    committed = _committed(admin, args, group)
    partitions = _reset_partitions(admin, args, committed)
    earliest = _log_offsets(admin, args, partitions, offset_spec("earliest"))
    latest = _log_offsets(admin, args, partitions, offset_spec("latest"))
    if args.to_earliest:
        targets = earliest
    elif args.to_latest:
        targets = latest
    elif args.to_offset is not None:
        targets = {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in partitions}
    else:
        found = _log_offsets(admin, args, partitions, offset_spec("timestamp", args.to_timestamp))
        targets = {tp: found[tp] if found.get(tp, -1) >= 0 else latest[tp] for tp in partitions}
    rows = [{"group": group, "topic": t, "partition": p, "current_offset": committed.get((t, p)),
             "new_offset": targets[(t, p)]} for t, p in partitions]
    if args.execute:
        state = _state(_describe_group(admin, args, group).state)
        if state not in _INACTIVE:
            raise CliError(f"offsets of group {group} can only be reset while it has no active members; "
                           f"it is {state}")
        request = ConsumerGroupTopicPartitions(group, [
            TopicPartition(r["topic"], r["partition"], r["new_offset"]) for r in rows])
        futures = admin.alter_consumer_group_offsets([request], request_timeout=args.timeout)
        answer = result(futures[group], args, f"cannot commit offsets of group {group}")
        failed = [tp for tp in answer.topic_partitions if tp.error is not None]
        if failed:
            tp = failed[0]
            raise CliError(f"cannot commit offset of {tp.topic}-{tp.partition} for group {group}: {tp.error.str()}")
    if args.json:
        write(json_lines(rows))
    else:
        write(render(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"),
                     [(r["group"], r["topic"], r["partition"], r["current_offset"], r["new_offset"]) for r in rows]))
    if args.execute:
        print(f"committed {len(rows)} offsets of group {group}", file=sys.stderr)
    else:
        print("dry run: nothing committed; add --execute to commit these offsets", file=sys.stderr)
    return 0


@command
def run_delete_offsets(args: argparse.Namespace) -> int:
    from tierlog.cli._wire import wire_client  # the protocol codec only when it is used
    from tierlog.protocol import ApiKey

    partitions: list[int] = args.partition
    if not partitions:
        metadata = admin_client(args).list_topics(args.topic, timeout=args.timeout)
        topic = metadata.topics.get(args.topic)
        if topic is None or topic.error is not None:
            raise CliError(f"topic {args.topic} does not exist")
        partitions = sorted(topic.partitions)
    with wire_client(args) as client:
        response = client.call(ApiKey.OFFSET_DELETE, {"group_id": args.group, "topics": [
            {"name": args.topic, "partitions": [{"partition_index": p} for p in dict.fromkeys(partitions)]}]})
    if int(response.error_code):
        raise CliError(f"cannot delete offsets of group {args.group}: {KafkaError(int(response.error_code)).name()}")
    rows = [(t.name, int(p.partition_index), KafkaError(int(p.error_code)).name() if int(p.error_code) else "Successful")
            for t in response.topics for p in t.partitions]
    if args.json:
        write(json_lines({"topic": t, "partition": p, "status": st} for t, p, st in rows))
    else:
        write(render(("TOPIC", "PARTITION", "STATUS"), rows))
    return 1 if any(st != "Successful" for _, _, st in rows) else 0
