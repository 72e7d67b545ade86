"""``tierlog produce`` and ``tierlog consume``: a console producer reading lines from stdin and a
console consumer writing records to stdout, as ``kafka-console-producer.sh`` and
``kafka-console-consumer.sh`` do (the output format is Kafka's DefaultMessageFormatter's)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, BinaryIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_STORED,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from tierlog.cli._kafka import (
    CliError,
    add_connection_options,
    check_reachable,
    client_config,
    command,
    describe,
    make_client,
    parse_pairs,
)
from tierlog.clock import SYSTEM_CLOCK, monotonic_s

log = logging.getLogger(__name__)

COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")
#: Errors after which consuming cannot go on; others (a broker restarting) librdkafka retries itself.
_FATAL_CONSUME_ERRORS = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION,
                         KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    prod = sub.add_parser("produce", help="send stdin lines to a topic", description=(
        "Send each line of stdin as one record to TOPIC (a topic the broker does not know is created when "
        "auto.create.topics.enable is on). Prints how many records the broker acknowledged; exits 1 if any "
        "was not."))
    prod.add_argument("topic", help="the topic")
    prod.add_argument("--key-separator", metavar="SEP",
                      help="split each line at the first SEP into key and value (a line without it is an error)")
    prod.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                      help="a header on every record (repeatable)")
    prod.add_argument("--partition", type=int, help="send every record to this partition "
                      "(default: by key hash, keyless records spread)")
    prod.add_argument("--compression", choices=COMPRESSION, default="none", help="codec of the batches (default none)")
    prod.add_argument("--acks", choices=("all", "1", "0"), default="all", help="acknowledgement level (default all)")
    prod.add_argument("--linger-ms", type=int, default=5, help="batching delay (default 5)")
    add_connection_options(prod)
    prod.set_defaults(func=run_produce)

    cons = sub.add_parser("consume", help="print a topic's records to stdout", description=(
        "Print records of TOPIC to stdout, one per line: [CreateTime:TS] [Partition:P] [Offset:O] [HEADERS] "
        "[KEY] VALUE, separated by tabs (Kafka's console consumer format), or --json. Without --group or "
        "with a start position it reads the partitions directly; with --group alone it joins the group and "
        "commits what it printed. Starts at the end unless told otherwise."))
    cons.add_argument("topic", help="the topic")
    start = cons.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (with --group: when the group has no committed offset)")
    start.add_argument("--offset", metavar="N", help="start at offset N of each partition (or earliest, latest)")
    start.add_argument("--timestamp", type=int, metavar="MS",
                       help="start at the first record with a timestamp at or after MS (ms since the epoch)")
    cons.add_argument("--partition", type=int, action="append", metavar="P",
                      help="only this partition (repeatable; default all)")
    cons.add_argument("--max-messages", type=int, metavar="N", help="stop after N records")
    cons.add_argument("--timeout-ms", type=int, metavar="MS",
                      help="stop when no record arrives for this long (default: wait for more until Ctrl-C)")
    cons.add_argument("--group", metavar="G", help="the consumer group: commit offsets as it prints")
    cons.add_argument("--print-key", action="store_true", help="print the key (null when absent)")
    cons.add_argument("--print-headers", action="store_true", help="print headers as k1:v1,k2:v2 (NO_HEADERS when none)")
    cons.add_argument("--print-timestamp", action="store_true", help="print CreateTime:MS or LogAppendTime:MS")
    cons.add_argument("--print-partition", action="store_true", help="print Partition:P")
    cons.add_argument("--print-offset", action="store_true", help="print Offset:O")
    cons.add_argument("--separator", default="\t", help="between the printed fields (default a tab)")
    cons.add_argument("--json", action="store_true",
                      help="one JSON object per record (topic, partition, offset, timestamp, key, value, headers)")
    add_connection_options(cons)
    cons.set_defaults(func=run_consume)


# -- produce ---------------------------------------------------------------------------------------


def _split(line: bytes, separator: bytes | None, number: int) -> tuple[bytes | None, bytes]:
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise CliError(f"line {number} has no key separator {separator.decode(errors='replace')!r}")
    return key, value


@command
def run_produce(args: argparse.Namespace) -> int:
    headers: list[tuple[str, str | bytes | None]] = [
        (k, v.encode()) for k, v in parse_pairs(args.header, "--header").items()]
    separator = args.key_separator.encode() if args.key_separator else None
    producer = make_client(Producer, client_config(args, **{
        "acks": args.acks, "compression.type": args.compression, "linger.ms": args.linger_ms,
        # Java clients' partitioner, so a key lands where kafka-console-producer would put it.
        "partitioner": "murmur2_random", "message.timeout.ms": max(int(args.timeout * 1000), 1)}))
    check_reachable(producer.list_topics, args, args.topic)
    acked = 0
    errors: list[str] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        nonlocal acked
        if error is None:
            acked += 1
        else:
            errors.append(describe(error))

    sent = 0
    failure: CliError | None = None
    try:
        for number, raw in enumerate(_lines(sys.stdin.buffer), 1):
            key, value = _split(raw, separator, number)
            extra: dict[str, Any] = {} if args.partition is None else {"partition": args.partition}
            while True:
                try:
                    producer.produce(args.topic, value=value, key=key, headers=headers or None,
                                     on_delivery=delivered, **extra)
                    break
                except BufferError:
                    producer.poll(0.1)  # the local queue is full: let deliveries drain it
            sent += 1
            producer.poll(0)
    except CliError as e:
        failure = e
    except KafkaException as e:
        failure = CliError(f"cannot send to {args.topic}: {describe(e)}")
    remaining = producer.flush(args.timeout + 1)
    if remaining:
        errors.append(f"{remaining} not delivered within {args.timeout:g}s")
    print(f"{acked} of {sent} records acknowledged by {args.topic}")
    if failure is not None:
        raise failure
    if errors:
        raise CliError(f"{sent - acked} records not acknowledged: {errors[0]}")
    return 0


def _lines(stream: BinaryIO) -> Any:
    for line in stream:
        yield line[:-1] if line.endswith(b"\n") else line


# -- consume ---------------------------------------------------------------------------------------


def _start_offset(args: argparse.Namespace) -> int | None:
    """The explicit start position, or None to let the group (or the end) decide."""
    if args.from_beginning:
        return OFFSET_BEGINNING
    if args.offset is None:
        return None
    if args.offset == "earliest":
        return OFFSET_BEGINNING
    if args.offset == "latest":
        return OFFSET_END
    try:
        offset = int(args.offset)
    except ValueError:
        raise CliError(f"--offset must be a number, earliest or latest, not {args.offset!r}") from None
    if offset < 0:
        raise CliError("--offset must not be negative")
    return offset


def _partitions(consumer: Consumer, args: argparse.Namespace) -> list[int]:
    metadata = check_reachable(consumer.list_topics, args, args.topic)
    topic = metadata.topics.get(args.topic)
    error = None if topic is None else topic.error
    if topic is None or (error is not None and error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                                  KafkaError._UNKNOWN_TOPIC)):
        raise CliError(f"topic {args.topic} does not exist")
    if error is not None:
        raise CliError(f"topic {args.topic}: {describe(error)}")
    available = sorted(topic.partitions)
    wanted = list(dict.fromkeys(args.partition or available))
    missing = [p for p in wanted if p not in available]
    if missing:
        raise CliError(f"topic {args.topic} has no partition {missing[0]} (it has {len(available)})")
    return wanted


def _assignment(consumer: Consumer, args: argparse.Namespace, partitions: list[int]) -> list[TopicPartition]:
    if args.timestamp is not None:
        wanted = [TopicPartition(args.topic, p, args.timestamp) for p in partitions]
        try:
            found = consumer.offsets_for_times(wanted, timeout=args.timeout)
        except KafkaException as e:
            raise CliError(f"cannot look up offsets for timestamp {args.timestamp}: {describe(e)}") from None
        # No record at or after the timestamp: start at the end, as Kafka's consumer does.
        return [TopicPartition(args.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END) for tp in found]
    start = _start_offset(args)
    if start is None:
        # A group resumes from its committed offsets (else auto.offset.reset); without one, the end.
        start = OFFSET_STORED if args.group is not None else OFFSET_END
    return [TopicPartition(args.topic, p, start) for p in partitions]


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def _headers(message: Message) -> list[tuple[str, bytes | None]]:
    """A consumed record's headers; the client's type also allows a dict and str values, for producing."""
    raw = message.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]


def _format(message: Message, args: argparse.Namespace) -> bytes:
    if args.json:
        ts_type, ts = message.timestamp()
        return json.dumps({
            "topic": message.topic(), "partition": message.partition(), "offset": message.offset(),
            "timestamp": ts, "timestamp_type": "LogAppendTime" if ts_type == 2 else "CreateTime",
            "key": None if message.key() is None else _text(message.key()),
            "value": None if message.value() is None else _text(message.value()),
            "headers": [[k, None if v is None else _text(v)] for k, v in _headers(message)],
        }).encode() + b"\n"
    sep: bytes = args.separator.encode()
    fields: list[bytes] = []
    if args.print_timestamp:
        ts_type, ts = message.timestamp()
        fields.append(f"{'LogAppendTime' if ts_type == 2 else 'CreateTime'}:{ts}".encode())
    if args.print_partition:
        fields.append(f"Partition:{message.partition()}".encode())
    if args.print_offset:
        fields.append(f"Offset:{message.offset()}".encode())
    if args.print_headers:
        headers = _headers(message)
        fields.append(b",".join(k.encode() + b":" + (b"null" if v is None else v) for k, v in headers)
                      if headers else b"NO_HEADERS")
    if args.print_key:
        key = message.key()
        fields.append(b"null" if key is None else key)
    value = message.value()
    fields.append(b"null" if value is None else value)
    return sep.join(fields) + b"\n"


@command
def run_consume(args: argparse.Namespace) -> int:
    explicit = args.from_beginning or args.offset is not None or args.timestamp is not None
    subscribe = args.group is not None and args.partition is None and (not explicit or args.from_beginning)
    group = args.group or f"tierlog-cli-{os.getpid()}"
    consumer = make_client(Consumer, client_config(args, **{
        "group.id": group,
        "enable.auto.commit": args.group is not None,
        # Offsets are stored only for records printed, so --max-messages commits exactly those.
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
    }))
    count = 0
    try:
        partitions = _partitions(consumer, args)
        if subscribe:
            consumer.subscribe([args.topic])
        else:
            consumer.assign(_assignment(consumer, args, partitions))
        count = _consume_loop(consumer, args)
    finally:
        if args.group is not None and count:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as e:
                log.warning("final commit of group %s failed: %s", args.group, describe(e))
        consumer.close()
    print(f"consumed {count} records", file=sys.stderr)
    return 0


def _consume_loop(consumer: Consumer, args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    idle_s = None if args.timeout_ms is None else args.timeout_ms / 1000
    count = 0
    last = monotonic_s(SYSTEM_CLOCK)
    assigned = False
    while args.max_messages is None or count < args.max_messages:
        now = monotonic_s(SYSTEM_CLOCK)
        if not assigned and consumer.assignment():
            assigned, last = True, now  # a group's rebalance does not count as idle time
        if idle_s is not None and now - last >= (idle_s if assigned else max(idle_s, args.timeout)):
            if not assigned:
                log.warning("no partitions of %s assigned within %gs", args.topic, now - last)
            break
        batch = consumer.consume(500 if args.max_messages is None else min(500, args.max_messages - count), 0.2)
        for message in batch:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                if error.fatal() or error.code() in _FATAL_CONSUME_ERRORS:
                    raise CliError(f"cannot consume {args.topic}: {describe(error)}")
                log.warning("%s", describe(error))
                continue
            try:
                out.write(_format(message, args))
            except BrokenPipeError:
                # The reader went away (`| head`): not an error; keep Python quiet at exit.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return count
            if args.group is not None:
                consumer.store_offsets(message)
            count += 1
            last = monotonic_s(SYSTEM_CLOCK)
        if batch:
            out.flush()
    return count
