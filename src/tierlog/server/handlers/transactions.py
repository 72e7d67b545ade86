"""The transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, and the admin
ones (DescribeTransactions, ListTransactions, DescribeProducers). InitProducerId with a transactional
id and FindCoordinator with key type TRANSACTION reach the coordinator from their own handlers.

PRODUCER_FENCED (KIP-588) is answered only to versions that know it; older ones get
INVALID_PRODUCER_EPOCH, as Kafka's KafkaApis does.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from tierlog.errors import ErrorCode as Code
from tierlog.errors import TierlogError, error_code_of
from tierlog.metadata.acls import AclOperation, ResourceType
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext
from tierlog.server.txn import rules
from tierlog.server.txn.coordinator import TransactionCoordinator
from tierlog.server.txn.records import TxnState

#: The first version of each API that knows PRODUCER_FENCED.
_FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2, ApiKey.ADD_OFFSETS_TO_TXN: 2,
                 ApiKey.END_TXN: 2, ApiKey.TXN_OFFSET_COMMIT: 3}


def client_code(api_key: ApiKey, version: int, code: int) -> int:
    if code == Code.PRODUCER_FENCED and version < _FENCED_SINCE.get(api_key, 0):
        return Code.INVALID_PRODUCER_EPOCH
    return code


def coordinator(ctx: BrokerContext) -> TransactionCoordinator:
    assert ctx.transactions is not None, "the broker wires a transaction coordinator"
    return ctx.transactions


async def handle_add_partitions_to_txn(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    txn = coordinator(ctx)

    async def one(txn_id: str, pid: int, epoch: int, topics: Any, verify_only: bool) -> list[dict[str, Any]]:
        tps = [(t.name, int(p)) for t in topics for p in t.partitions]
        denied = _add_partitions_denied(ctx, client, txn_id, topics)
        if denied is not None:
            codes = denied
        elif verify_only:
            codes = txn.verify_partitions(txn_id, pid, epoch, tps)
        else:
            codes = await txn.add_partitions(txn_id, pid, epoch, tps)
        out = []
        for t in topics:
            out.append({"name": t.name, "results_by_partition": [
                {"partition_index": p, "partition_error_code": client_code(
                    ApiKey.ADD_PARTITIONS_TO_TXN, version, codes[(t.name, int(p))])} for p in t.partitions]})
        return out

    if version >= 4 and not ctx.allowed(client, AclOperation.CLUSTER_ACTION):
        # v4+ is the brokers' batched verification (KIP-890): a cluster action.
        return build_response(ApiKey.ADD_PARTITIONS_TO_TXN, version, {
            "error_code": Code.CLUSTER_AUTHORIZATION_FAILED, "results_by_transaction": []})
    if version <= 3:
        results = await one(body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                            body.v3_and_below_producer_epoch, body.v3_and_below_topics, False)
        return build_response(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"results_by_topic_v3_and_below": results})
    out = []
    for t in body.transactions:
        out.append({"transactional_id": t.transactional_id,
                    "topic_results": await one(t.transactional_id, t.producer_id, t.producer_epoch, t.topics,
                                               t.verify_only)})
    return build_response(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"error_code": 0, "results_by_transaction": out})


def _add_partitions_denied(ctx: BrokerContext, client: ClientInfo, txn_id: str,
                           topics: Any) -> dict[tuple[str, int], int] | None:
    """Kafka's AddPartitionsToTxn checks: WRITE on the transactional id (every partition
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic (the refused ones
    TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED); None when all is allowed."""
    tps = [(t.name, int(p)) for t in topics for p in t.partitions]
    if not ctx.allowed(client, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return dict.fromkeys(tps, Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    refused = {t.name for t in topics if not ctx.allowed(client, AclOperation.WRITE, ResourceType.TOPIC, t.name)}
    if not refused:
        return None
    return {tp: Code.TOPIC_AUTHORIZATION_FAILED if tp[0] in refused else Code.OPERATION_NOT_ATTEMPTED for tp in tps}


async def handle_add_offsets_to_txn(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    if not ctx.allowed(client, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        return build_response(ApiKey.ADD_OFFSETS_TO_TXN, request.api_version, {
            "error_code": Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
    if not ctx.allowed(client, AclOperation.READ, ResourceType.GROUP, body.group_id):
        return build_response(ApiKey.ADD_OFFSETS_TO_TXN, request.api_version, {
            "error_code": Code.GROUP_AUTHORIZATION_FAILED})
    code = await coordinator(ctx).add_offsets(body.transactional_id, body.producer_id, body.producer_epoch,
                                              body.group_id)
    return build_response(ApiKey.ADD_OFFSETS_TO_TXN, request.api_version, {
        "error_code": client_code(ApiKey.ADD_OFFSETS_TO_TXN, request.api_version, code)})


#: The first versions sent by a client running transaction version 2 (KIP-890 part 2): EndTxn bumps
#: the epoch; Produce and TxnOffsetCommit add their partition to the transaction themselves.
END_TXN_TV2_SINCE, PRODUCE_TV2_SINCE, TXN_OFFSET_COMMIT_TV2_SINCE = 5, 12, 5


def implicit_add(ctx: BrokerContext, version: int, since: int) -> bool:
    """Whether a Produce/TxnOffsetCommit ``version`` adds its partition to the transaction: a TV2
    request on a cluster whose finalized transaction.version is 2 (clients send those versions only
    then; the check keeps a TV0/TV1 cluster's rules whatever a client sends)."""
    return version >= since and coordinator(ctx).transaction_version() >= 2


async def handle_end_txn(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    if not ctx.allowed(client, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        return build_response(ApiKey.END_TXN, version, {"error_code": Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
    code, producer_id, producer_epoch = await coordinator(ctx).end_txn(
        body.transactional_id, body.producer_id, body.producer_epoch, body.committed,
        client_transaction_version=2 if version >= END_TXN_TV2_SINCE else 0)
    out: dict[str, Any] = {"error_code": client_code(ApiKey.END_TXN, version, code)}
    if version >= END_TXN_TV2_SINCE:
        out |= {"producer_id": producer_id, "producer_epoch": producer_epoch}
    return build_response(ApiKey.END_TXN, version, out)


async def handle_txn_offset_commit(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    txn = coordinator(ctx)
    groups = ctx.groups
    assert groups is not None
    entries = [(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata) for t in body.topics for p in t.partitions]
    # The offsets partition must be part of the producer's ongoing transaction (AddOffsetsToTxn first).
    await groups.ensure_topic()
    offsets_tp = ("__consumer_offsets", groups.offsets_partition(body.group_id)) if body.group_id else None
    refused_topics = {t.name for t in body.topics
                      if not ctx.allowed(client, AclOperation.READ, ResourceType.TOPIC, t.name)}
    code: int
    if not ctx.allowed(client, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        code = Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.allowed(client, AclOperation.READ, ResourceType.GROUP, body.group_id):
        code = Code.GROUP_AUTHORIZATION_FAILED
    elif offsets_tp is None:
        code = Code.INVALID_GROUP_ID
    elif implicit_add(ctx, version, TXN_OFFSET_COMMIT_TV2_SINCE):
        code = rules.verification_error((await txn.add_partitions(
            body.transactional_id, body.producer_id, body.producer_epoch, [offsets_tp],
            client_transaction_version=2))[offsets_tp], abortable_known=True)
    else:
        code = rules.verification_error(txn.verify_partitions(
            body.transactional_id, body.producer_id, body.producer_epoch, [offsets_tp])[offsets_tp],
            abortable_known=version >= 4)
    if code == Code.NONE:
        allowed = [e for e in entries if e[0] not in refused_topics]
        done = iter(await groups.txn_commit(body.group_id, getattr(body, "member_id", ""),
                                            getattr(body, "generation_id", -1), body.producer_id,
                                            body.producer_epoch, allowed,
                                            group_instance_id=getattr(body, "group_instance_id", None))
                    if allowed else [])
        codes = [Code.TOPIC_AUTHORIZATION_FAILED if e[0] in refused_topics else next(done) for e in entries]
    else:
        codes = [code] * len(entries)
    codes = [client_code(ApiKey.TXN_OFFSET_COMMIT, version, c) for c in codes]
    it = iter(codes)
    return build_response(ApiKey.TXN_OFFSET_COMMIT, version, {"topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": next(it)}
                                        for p in t.partitions]} for t in body.topics]})


def _ms_datetime(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(max(ms, 0) / 1000.0, tz=datetime.UTC)


async def handle_describe_transactions(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    txn = coordinator(ctx)
    out = []
    for txn_id in request.body.transactional_ids:
        meta = txn.txns.get(txn_id)
        if not ctx.allowed(client, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            out.append({"error_code": Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional_id": txn_id,
                        "transaction_state": "", "transaction_timeout": datetime.timedelta(0),
                        "transaction_start_time": _ms_datetime(0), "producer_id": -1, "producer_epoch": -1,
                        "topics": []})
            continue
        if meta is None or meta.state is TxnState.DEAD:
            out.append({"error_code": Code.TRANSACTIONAL_ID_NOT_FOUND, "transactional_id": txn_id,
                        "transaction_state": "", "transaction_timeout": datetime.timedelta(0),
                        "transaction_start_time": _ms_datetime(0), "producer_id": -1, "producer_epoch": -1,
                        "topics": []})
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(p)
        out.append({
            "error_code": 0,
            "transactional_id": txn_id, "transaction_state": meta.state.kafka_name,
            "transaction_timeout": datetime.timedelta(milliseconds=meta.timeout_ms),
            # Kafka answers -1 when no transaction is open; kio's timestamp type takes the epoch then.
            "transaction_start_time": _ms_datetime(meta.start_ms),
            "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        })
    return build_response(ApiKey.DESCRIBE_TRANSACTIONS, request.api_version, {"transaction_states": out})


async def handle_list_transactions(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    txn = coordinator(ctx)
    known = {s.kafka_name for s in TxnState}
    states = set(body.state_filters)
    unknown = sorted(states - known)
    pids = set(body.producer_id_filters)
    min_duration_ms = getattr(body, "duration_filter", -1)
    pattern = getattr(body, "transactional_id_pattern", None)
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error:
        return build_response(ApiKey.LIST_TRANSACTIONS, request.api_version, {
            "error_code": Code.INVALID_REGULAR_EXPRESSION, "unknown_state_filters": [],
            "transaction_states": []})
    now = txn.now_ms()
    out = []
    for txn_id, meta in sorted(txn.txns.items()):
        if meta.state is TxnState.DEAD:  # being expired (Kafka leaves these out too)
            continue
        if states and meta.state.kafka_name not in states:
            continue
        if pids and meta.producer_id not in pids:
            continue
        # Kafka's TransactionStateManager.listTransactionStates: a transaction is listed when it
        # started more than DurationFilter ms ago, whatever its state (Empty has no start: -1).
        if min_duration_ms >= 0 and now - meta.start_ms <= min_duration_ms:
            continue
        if regex is not None and not regex.fullmatch(txn_id):
            continue
        if not ctx.allowed(client, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id, log_denied=False):
            continue
        out.append({"transactional_id": txn_id, "producer_id": meta.producer_id,
                    "transaction_state": meta.state.kafka_name})
    return build_response(ApiKey.LIST_TRANSACTIONS, request.api_version, {
        "error_code": 0, "unknown_state_filters": unknown, "transaction_states": out})


def _describe_producers_blocking(ctx: BrokerContext, wanted: list[tuple[str, list[int]]],
                                 refused: set[str]) -> list[dict[str, Any]]:
    out = []
    for topic, partitions in wanted:
        results: list[dict[str, Any]] = []
        for p in partitions:
            if topic in refused:
                results.append({"partition_index": p, "error_code": Code.TOPIC_AUTHORIZATION_FAILED,
                                "error_message": None, "active_producers": []})
                continue
            try:
                ulog = ctx.partitions.get_log_blocking(topic, p)
                ulog.check_online()
            except TierlogError as e:
                # Unknown, or refused at startup (UnsupportedRecordFormatError) or on an offline log
                # dir: KAFKA_STORAGE_ERROR for those, as Kafka's getPartitionOrError answers an
                # offline partition (see PartitionManager.read_blocking).
                results.append({"partition_index": p, "error_code": error_code_of(e),
                                "error_message": None, "active_producers": []})
                continue
            with ulog.lock:
                entries = list(ulog.producer_state.producers.values())
            results.append({"partition_index": p, "error_code": 0, "error_message": None, "active_producers": [{
                "producer_id": e.producer_id, "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
                "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                "current_txn_start_offset": -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
            } for e in entries]})
        out.append({"name": topic, "partitions": results})
    return out


async def handle_describe_producers(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    wanted = [(t.name, [int(p) for p in t.partition_indexes]) for t in request.body.topics]
    refused = {t for t, _ in wanted if not ctx.allowed(client, AclOperation.READ, ResourceType.TOPIC, t)}
    topics = await ctx.io.run(_describe_producers_blocking, ctx, wanted, refused)
    return build_response(ApiKey.DESCRIBE_PRODUCERS, request.api_version, {"topics": topics})


async def handle_write_txn_markers(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    txn = coordinator(ctx)
    image = ctx.image
    out = []
    if not ctx.allowed(client, AclOperation.CLUSTER_ACTION):
        # Only a broker (a principal with CLUSTER_ACTION) may write transaction markers.
        return build_response(ApiKey.WRITE_TXN_MARKERS, request.api_version, {"markers": [
            {"producer_id": m.producer_id, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p, "error_code": Code.CLUSTER_AUTHORIZATION_FAILED}
                                                for p in t.partition_indexes]} for t in m.topics]}
            for m in request.body.markers]})
    for m in request.body.markers:
        topics = []
        for t in m.topics:
            results = []
            for p in t.partition_indexes:
                topic = image.topics_by_name.get(t.name)
                if topic is None or int(p) not in topic.partitions:
                    code: int = Code.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    code = await txn.write_marker(t.name, int(p), m.producer_id, m.producer_epoch,
                                                  m.coordinator_epoch, m.transaction_result)
                results.append({"partition_index": p, "error_code": code})
            topics.append({"name": t.name, "partitions": results})
        out.append({"producer_id": m.producer_id, "topics": topics})
    return build_response(ApiKey.WRITE_TXN_MARKERS, request.api_version, {"markers": out})


HANDLERS = {
    ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
    ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers,
}
