"""``tierlog transactions``: list and describe the transactions of a running broker and abort a hanging
one -- what ``kafka-transactions.sh`` does, over ListTransactions, DescribeTransactions,
DescribeProducers and WriteTxnMarkers (confluent-kafka's AdminClient has none of them).

``abort`` is for a *hanging* transaction: one a partition still holds open (its LSO stuck) that no
coordinator will end. Name the partition and either the transaction's start offset (the producer is
looked up with DescribeProducers) or the producer id, epoch and coordinator epoch.
"""

from __future__ import annotations

import argparse
import datetime
import json
from typing import Any

from tierlog.cli._kafka import CliError, add_wire_options, command
from tierlog.cli._table import render, write
from tierlog.errors import ErrorCode


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("transactions", help="list, describe and abort transactions",
                       description="Transactions of a running broker, like kafka-transactions.sh.")
    tsub = p.add_subparsers(dest="transactions_command", metavar="ACTION")
    tsub.required = True

    lst = tsub.add_parser("list", help="list transactional ids and their states",
                          description="Every transactional id the coordinator knows, with its producer id and "
                                      "state; filters as ListTransactions has them.")
    lst.add_argument("--state", action="append", default=[], metavar="STATE",
                     help="only this state (Empty, Ongoing, PrepareCommit, ...; repeatable)")
    lst.add_argument("--producer-id", action="append", type=int, default=[], metavar="ID",
                     help="only this producer id (repeatable)")
    lst.add_argument("--json", action="store_true", help="one JSON object per transactional id")
    add_wire_options(lst)
    lst.set_defaults(func=run_list)

    describe = tsub.add_parser("describe", help="the state of one transactional id",
                               description="Producer id and epoch, state, timeout, start time and the partitions "
                                           "of the open transaction.")
    describe.add_argument("transactional_id", metavar="ID")
    describe.add_argument("--json", action="store_true", help="a JSON object")
    add_wire_options(describe)
    describe.set_defaults(func=run_describe)

    abort = tsub.add_parser("abort", help="abort a hanging transaction on a partition",
                            description="Write an ABORT marker into a partition for a producer's open "
                                        "transaction, as kafka-transactions.sh abort does.")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", required=True, type=int)
    abort.add_argument("--start-offset", type=int, help="the first offset of the hanging transaction")
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)
    add_wire_options(abort)
    abort.set_defaults(func=run_abort)


def _check(code: int, what: str) -> None:
    if code:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = "UNKNOWN"
        raise CliError(f"{what}: {name} ({code})")


@command
def run_list(args: argparse.Namespace) -> int:
    from tierlog.cli._wire import wire_client
    from tierlog.protocol import ApiKey

    with wire_client(args) as client:
        body = client.call(ApiKey.LIST_TRANSACTIONS, {"state_filters": args.state, "producer_id_filters":
                                                      args.producer_id, "duration_filter": -1,
                                                      "transactional_id_pattern": None})
    _check(int(body.error_code), "cannot list transactions")
    if body.unknown_state_filters:
        raise CliError(f"unknown states: {', '.join(body.unknown_state_filters)}")
    rows = [(t.transactional_id, str(t.producer_id), t.transaction_state) for t in body.transaction_states]
    if args.json:
        write("".join(json.dumps({"transactional_id": i, "producer_id": int(p), "state": s}) + "\n"
                      for i, p, s in rows))
    else:
        write(render(("TRANSACTIONAL ID", "PRODUCER ID", "STATE"), rows))
    return 0


def _ms(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


@command
def run_describe(args: argparse.Namespace) -> int:
    from tierlog.cli._wire import wire_client
    from tierlog.protocol import ApiKey

    with wire_client(args) as client:
        body = client.call(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [args.transactional_id]})
    state = body.transaction_states[0]
    _check(int(state.error_code), f"cannot describe transactional id {args.transactional_id}")
    partitions = [f"{t.topic}-{p}" for t in state.topics for p in t.partitions]
    start = _ms(state.transaction_start_time) if partitions else -1
    info = {"transactional_id": state.transactional_id, "producer_id": int(state.producer_id),
            "producer_epoch": int(state.producer_epoch), "state": state.transaction_state,
            "timeout_ms": _ms(state.transaction_timeout), "start_time_ms": start, "partitions": partitions}
    if args.json:
        write(json.dumps(info) + "\n")
    else:
        write(render(("TRANSACTIONAL ID", "PRODUCER ID", "EPOCH", "STATE", "TIMEOUT MS", "START MS", "PARTITIONS"),
                     [(info["transactional_id"], str(info["producer_id"]), str(info["producer_epoch"]),
                       info["state"], str(info["timeout_ms"]), str(start), ",".join(partitions) or "-")]))
    return 0


@command
def run_abort(args: argparse.Namespace) -> int:
    from tierlog.cli._wire import wire_client
    from tierlog.protocol import ApiKey

    with wire_client(args) as client:
        pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
        if args.start_offset is not None:
            body = client.call(ApiKey.DESCRIBE_PRODUCERS, {"topics": [
                {"name": args.topic, "partition_indexes": [args.partition]}]})
            part = body.topics[0].partitions[0]
            _check(int(part.error_code), f"cannot describe the producers of {args.topic}-{args.partition}")
            found = [p for p in part.active_producers if p.current_txn_start_offset == args.start_offset]
            if not found:
                raise CliError(f"no open transaction starts at offset {args.start_offset} in "
                               f"{args.topic}-{args.partition}")
            pid, epoch = int(found[0].producer_id), int(found[0].producer_epoch)
            coordinator_epoch = max(int(found[0].coordinator_epoch), 0)
        elif None in (pid, epoch, coordinator_epoch):
            raise CliError("give --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch")
        body = client.call(ApiKey.WRITE_TXN_MARKERS, {"markers": [{
            "producer_id": pid, "producer_epoch": epoch, "transaction_result": False, "coordinator_epoch":
            coordinator_epoch, "topics": [{"name": args.topic, "partition_indexes": [args.partition]}]}]})
    code = int(body.markers[0].topics[0].partitions[0].error_code)
    _check(code, f"cannot abort the transaction of producer {pid} in {args.topic}-{args.partition}")
    print(f"aborted the transaction of producer {pid} (epoch {epoch}) in {args.topic}-{args.partition}")
    return 0
