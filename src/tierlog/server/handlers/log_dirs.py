"""DescribeLogDirs, AlterReplicaLogDirs and ElectLeaders as Kafka's single broker answers them.

* **DescribeLogDirs** (Kafka's KafkaApis.handleDescribeLogDirsRequest and ReplicaManager.describeLogDirs):
  DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED and no results (v3+ carry the code; v1-2
  just an empty answer). Every configured log dir is a result: KAFKA_STORAGE_ERROR for an offline one,
  else its total and usable bytes and, per topic, the asked partitions it holds (all when ``topics`` is
  null) with their local size and offset lag (high watermark - log end offset: 0 on one broker);
  partitions it does not hold are left out, and topics left with none.
* **AlterReplicaLogDirs** (ReplicaManager.alterReplicaLogDirs): ALTER on the cluster, else every
  partition CLUSTER_AUTHORIZATION_FAILED. Per partition: LOG_DIR_NOT_FOUND for a path that is not one
  of ``log.dirs``, KAFKA_STORAGE_ERROR for an offline one, REPLICA_NOT_AVAILABLE for a partition this
  broker has no log of, NONE when the log is already in that dir. Moving a log to another dir (Kafka's
  future replica and ReplicaAlterLogDirsThread) is not implemented: KAFKA_STORAGE_ERROR, as Kafka
  answers when it cannot create the future log, and a WARNING saying so.
* **ElectLeaders** (the controller's ReplicationControlManager.electLeaders): ALTER on the cluster,
  else CLUSTER_AUTHORIZATION_FAILED on the request and every partition; an unknown election type is
  INVALID_REQUEST the same way. Per partition: UNKNOWN_TOPIC_OR_PARTITION ("No such topic as T", "No
  such partition as T-P"), ELECTION_NOT_NEEDED when the leader already is the preferred replica
  (preferred) or there is a leader (unclean) -- always, for a live partition of one broker -- else
  PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE. With ``topic_partitions`` null
  every topic gets a result listing only the partitions whose answer is not ELECTION_NOT_NEEDED.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from tierlog.errors import ErrorCode
from tierlog.ids import TopicPartition
from tierlog.metadata.acls import AclOperation
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext

log = logging.getLogger(__name__)

PREFERRED, UNCLEAN = 0, 1
#: Kafka's Errors.ELECTION_NOT_NEEDED.message(), which ApiError(Errors) carries as its message.
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


def _describe_dirs(ctx: BrokerContext, wanted: set[TopicPartition] | None) -> list[dict[str, Any]]:
    """Blocking (stats files and the disk): run on the storage I/O thread."""
    manager = ctx.log_manager
    by_dir: dict[Path, dict[str, list[dict[str, Any]]]] = {}
    for (topic, partition), ulog in sorted(manager.all_logs().items()):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        lag = max(ulog.high_watermark - ulog.log_end_offset, 0)
        by_dir.setdefault(ulog.dir.parent, {}).setdefault(topic, []).append({
            "partition_index": partition, "partition_size": ulog.size_bytes_unloaded(), "offset_lag": lag,
            "is_future_key": False})
    results: list[dict[str, Any]] = []
    for d in manager.log_dirs:
        if manager.failure_channel.offline_reason(d) is not None:
            results.append({"log_dir": str(d), "error_code": ErrorCode.KAFKA_STORAGE_ERROR, "topics": []})
            continue
        try:
            usage = shutil.disk_usage(d)
        except OSError as e:
            log.warning("Unable to describe replica dirs for %s: %s", d, e)
            results.append({"log_dir": str(d), "error_code": ErrorCode.KAFKA_STORAGE_ERROR, "topics": []})
            continue
        topics = [{"name": name, "partitions": parts} for name, parts in by_dir.get(d, {}).items()]
        results.append({"log_dir": str(d), "error_code": ErrorCode.NONE, "topics": topics,
                        "total_bytes": usage.total, "usable_bytes": usage.free, "is_cordoned": False})
    return results


async def handle_describe_log_dirs(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    if not ctx.allowed(client, AclOperation.DESCRIBE):
        return build_response(ApiKey.DESCRIBE_LOG_DIRS, request.api_version, {
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []})
    wanted = None if body.topics is None else {
        (str(t.topic), int(p)) for t in body.topics for p in t.partitions}
    results = await ctx.io.run(_describe_dirs, ctx, wanted)
    return build_response(ApiKey.DESCRIBE_LOG_DIRS, request.api_version, {"error_code": 0, "results": results})


def _alter_one(ctx: BrokerContext, topic: str, partition: int, destination: str) -> ErrorCode:
    manager = ctx.log_manager
    target = next((d for d in manager.log_dirs if str(d) in (destination, str(Path(destination).resolve()))), None)
    if target is None or not Path(destination).is_absolute():
        return ErrorCode.LOG_DIR_NOT_FOUND
    if manager.failure_channel.offline_reason(target) is not None:
        return ErrorCode.KAFKA_STORAGE_ERROR
    ulog = manager.get_log(topic, partition)
    if ulog is None:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    if ulog.dir.parent == target:
        return ErrorCode.NONE
    log.warning("AlterReplicaLogDirs: moving %s-%d from %s to %s is not implemented (tierlog does not move "
                "logs between log dirs); answered KAFKA_STORAGE_ERROR", topic, partition, ulog.dir.parent, target)
    return ErrorCode.KAFKA_STORAGE_ERROR


async def handle_alter_replica_log_dirs(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    permitted = ctx.allowed(client, AclOperation.ALTER)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for entry in request.body.dirs:
        for topic in entry.topics:
            for partition in topic.partitions:
                code = (_alter_one(ctx, str(topic.name), int(partition), str(entry.path)) if permitted
                        else ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                by_topic.setdefault(str(topic.name), []).append({"partition_index": int(partition), "error_code": code})
    return build_response(ApiKey.ALTER_REPLICA_LOG_DIRS, request.api_version, {
        "results": [{"topic_name": name, "partitions": parts} for name, parts in by_topic.items()]})


def _election(ctx: BrokerContext, topic: str, partition: int, election_type: int) -> tuple[ErrorCode, str | None]:
    t = ctx.image.topics_by_name.get(topic)
    if t is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
    p = t.partitions.get(partition)
    if p is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{partition}"
    preferred = p.replicas[0] if p.replicas else -1
    if (election_type == PREFERRED and p.leader == preferred and p.leader >= 0) or (
            election_type == UNCLEAN and p.leader >= 0):
        return ErrorCode.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE
    # One broker: no other replica could take over.
    if election_type == PREFERRED:
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "The preferred leader was not available."
    return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "Eligible topic partition leaders are not available."


async def handle_elect_leaders(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    election_type = int(getattr(body, "election_type", PREFERRED))
    refusal: tuple[ErrorCode, str | None] | None = None
    if not ctx.allowed(client, AclOperation.ALTER):
        refusal = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    elif election_type not in (PREFERRED, UNCLEAN):
        refusal = ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}"
    results: list[dict[str, Any]] = []
    if refusal is not None:
        # Kafka's ElectLeadersRequest.getErrorResponse: the error on the request and on each partition.
        for topic in body.topic_partitions or ():
            results.append({"topic": str(topic.topic), "partition_result": [
                {"partition_id": int(p), "error_code": refusal[0], "error_message": refusal[1]}
                for p in topic.partitions]})
        return build_response(ApiKey.ELECT_LEADERS, request.api_version, {
            "error_code": refusal[0], "replica_election_results": results})
    if body.topic_partitions is None:
        for name in sorted(ctx.image.topics_by_name):
            parts = []
            for pid in sorted(ctx.image.topics_by_name[name].partitions):
                code, message = _election(ctx, name, pid, election_type)
                if code != ErrorCode.ELECTION_NOT_NEEDED:
                    parts.append({"partition_id": pid, "error_code": code, "error_message": message})
            results.append({"topic": name, "partition_result": parts})
    else:
        for topic in body.topic_partitions:
            parts = []
            for pid in topic.partitions:
                code, message = _election(ctx, str(topic.topic), int(pid), election_type)
                parts.append({"partition_id": int(pid), "error_code": code, "error_message": message})
            results.append({"topic": str(topic.topic), "partition_result": parts})
    return build_response(ApiKey.ELECT_LEADERS, request.api_version, {
        "error_code": 0, "replica_election_results": results})


HANDLERS = {ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
            ApiKey.ALTER_REPLICA_LOG_DIRS: handle_alter_replica_log_dirs,
            ApiKey.ELECT_LEADERS: handle_elect_leaders}
