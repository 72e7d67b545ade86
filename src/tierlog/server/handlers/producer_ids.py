"""InitProducerId.

Without a transactional id each call hands out a fresh producer id at epoch 0, as Kafka does (a
producer that bumps its epoch after an error gets a new id the same way). With one, the transaction
coordinator answers: the id's producer id with a bumped epoch, fencing older producers of the id.
"""

from __future__ import annotations

from tierlog.errors import ErrorCode, TierlogError
from tierlog.metadata.acls import AclOperation, ResourceType
from tierlog.protocol import ApiKey, ParsedRequest, build_response, to_millis
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext
from tierlog.server.handlers.transactions import client_code


async def handle_init_producer_id(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    version = request.api_version
    body = request.body
    def refuse(code: ErrorCode) -> Reply:
        return build_response(ApiKey.INIT_PRODUCER_ID, version, {"error_code": code, "producer_id": -1,
                                                                 "producer_epoch": -1})
    if body.transactional_id is not None:
        if not ctx.allowed(client, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
            return refuse(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not (ctx.allowed(client, AclOperation.IDEMPOTENT_WRITE, log_denied=False)
              or ctx.allowed_by_type(client, AclOperation.WRITE, ResourceType.TOPIC)):
        # Kafka: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
        return refuse(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if body.transactional_id is not None and ctx.transactions is not None:
        code, pid, epoch = await ctx.transactions.init_producer_id(
            body.transactional_id, to_millis(body.transaction_timeout), getattr(body, "producer_id", -1),
            getattr(body, "producer_epoch", -1))
        return build_response(ApiKey.INIT_PRODUCER_ID, version, {
            "error_code": client_code(ApiKey.INIT_PRODUCER_ID, version, code), "producer_id": pid,
            "producer_epoch": epoch})
    if body.transactional_id is not None:
        return build_response(ApiKey.INIT_PRODUCER_ID, version, {
            "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1})
    try:
        producer_id = await ctx.io.run(ctx.producer_ids.next_blocking)
    except TierlogError as e:
        return build_response(ApiKey.INIT_PRODUCER_ID, version, {
            "error_code": e.error_code, "producer_id": -1, "producer_epoch": -1})
    return build_response(ApiKey.INIT_PRODUCER_ID, version, {
        "error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0})


HANDLERS = {ApiKey.INIT_PRODUCER_ID: handle_init_producer_id}
