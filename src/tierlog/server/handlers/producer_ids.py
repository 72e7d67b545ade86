"""InitProducerId for idempotent producers.

Each call hands out a fresh producer id at epoch 0, as Kafka does for a producer without a
transactional id (a producer that bumps its epoch after an error gets a new id the same way).
Transactions are not implemented -- no transaction coordinator, no AddPartitionsToTxn/EndTxn -- so
a transactional id is refused with ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients report as
fatal rather than retrying forever.
"""

from __future__ import annotations

from tierlog.errors import ErrorCode, TierlogError
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext


async def handle_init_producer_id(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    version = request.api_version
    if request.body.transactional_id is not None:
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
