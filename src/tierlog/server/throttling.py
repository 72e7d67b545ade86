"""Applies client quotas to a served request (Kafka's KafkaApis throttling, KIP-219): records the
request's bytes and handling time against its quotas, puts the throttle time in the response, and
tells the connection to stop reading for that long once the response is written.

* Produce: the request's size (Kafka records ``request.sizeInBytes``) against producer_byte_rate.
* Fetch: the response's size against consumer_byte_rate; a throttled fetch is answered empty, as
  Kafka's ``getThrottledResponse`` does, and the bytes not sent are taken back off the rate.
* Every request but ApiVersions and SASL: its handling time against request_percentage.
The larger throttle time wins.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
from collections.abc import Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from tierlog.protocol import ApiKey, ParsedRequest
from tierlog.server.connection import ClientInfo, CloseConnection, Deferred, RawResponse, Reply
from tierlog.server.connection_rate import ConnectionCreationRate, IpConnectionRates, ListenerConnectionRate
from tierlog.server.fetch_response import encode_fetch_response
from tierlog.server.metric_families import Figure, families
from tierlog.server.quotas import QuotaManager, QuotaType

#: Never counted against request_percentage (Kafka exempts them too: a throttled client must still
#: be able to negotiate versions and authenticate).
EXEMPT = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
#: Requests that wait by design (a long-polling fetch, a join waiting for the rebalance): their time
#: in the handler is mostly waiting, which Kafka (timing thread time, not purgatory) does not count.
#: tierlog's handlers are coroutines, so only the wall time around them is known: these count 0.
PARKING = frozenset({ApiKey.FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP})
_I32 = struct.Struct(">i")
_FLEXIBLE_FETCH = 12


def user_of(client: ClientInfo) -> str:
    """The quota user: the principal's name (``ANONYMOUS`` on an unauthenticated listener, as in Kafka)."""
    principal = client.principal
    return principal.split(":", 1)[1] if ":" in principal else principal


def produce_bytes(body: Any) -> int:
    total = 0
    for topic in body.topic_data:
        for partition in topic.partition_data:
            records = partition.records
            total += len(records) if records is not None else 0
    return total


def apply_quotas(quotas: QuotaManager | None, request: ParsedRequest, client: ClientInfo, reply: Reply,
                 handling_ns: int, now_ms: int) -> Reply:
    """The reply with its throttle time set; ``client.throttle_ms`` says how long to stay muted."""
    if quotas is None or request.api_key in EXEMPT or isinstance(reply, CloseConnection):
        return reply
    if not quotas.any_configured:
        # No rate to record against (QuotaManager.record would resolve none): only a throttle the
        # handler set (the controller mutation quota) can apply.
        throttle = client.throttle_ms
        return reply if throttle <= 0 else _throttled(reply, throttle, client)
    user = user_of(client)
    client_id = client.client_id
    throttle = quotas.record_request_time(user, client_id, 0 if request.api_key in PARKING else handling_ns, now_ms)
    if request.api_key == ApiKey.PRODUCE:
        throttle = max(throttle, quotas.record(QuotaType.PRODUCE, user, client_id, produce_bytes(request.body),
                                               now_ms))
    elif request.api_key == ApiKey.FETCH and isinstance(reply, RawResponse):
        size = reply.size
        fetch_throttle = quotas.record(QuotaType.FETCH, user, client_id, size, now_ms)
        throttle = max(throttle, fetch_throttle)
        if throttle > 0:
            quotas.record(QuotaType.FETCH, user, client_id, -size, now_ms)
            reply = _empty_fetch(request, reply, throttle)
    # A throttle set while the handler ran (the controller mutation quota) counts too.
    throttle = max(throttle, client.throttle_ms)
    if throttle <= 0:
        return reply
    return _throttled(reply, throttle, client)


def _throttled(reply: Reply, throttle: int, client: ClientInfo) -> Reply:
    """``reply`` carrying ``throttle`` ms, ``client`` muted that long."""
    client.throttle_ms = throttle
    if isinstance(reply, Deferred):
        # A durable produce answers after its group commit: the throttle time goes in that answer.
        return Deferred(_throttled_later(reply, throttle))
    if reply is None or isinstance(reply, CloseConnection):
        return reply
    if isinstance(reply, RawResponse):
        return reply.with_throttle_time(throttle)
    if hasattr(reply, "throttle_time"):
        return dataclasses.replace(reply, throttle_time=datetime.timedelta(milliseconds=throttle))
    return reply


async def _throttled_later(reply: Deferred, throttle_ms: int) -> Any:
    body: Any = await reply.reply
    if isinstance(body, RawResponse):
        return body.with_throttle_time(throttle_ms)
    if body is not None and hasattr(body, "throttle_time"):
        return dataclasses.replace(body, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
    return body


#: The first versions that are refused when the mutation quota is exceeded (KIP-599); older ones
#: are only throttled, since their clients do not know THROTTLING_QUOTA_EXCEEDED.
_STRICT_FROM = {ApiKey.CREATE_TOPICS: 6, ApiKey.CREATE_PARTITIONS: 3, ApiKey.DELETE_TOPICS: 5}
THROTTLED_MESSAGE = "The throttling quota has been exceeded."


def fetch_max_bytes(quotas: QuotaManager | None, client: ClientInfo, max_bytes: int) -> int:
    """A consumer's fetch max_bytes capped at what its consumer_byte_rate lets it take in a quota
    window (Kafka's KafkaApis.handleFetchRequest does the same; the first batch still always goes)."""
    if quotas is None:
        return max_bytes
    cap = quotas.max_value_in_window(QuotaType.FETCH, user_of(client), client.client_id)
    return max_bytes if cap is None else max(0, min(max_bytes, int(cap)))


def mutation_refused(quotas: QuotaManager | None, request: ParsedRequest, client: ClientInfo, now_ms: int) -> bool:
    """Before one topic of a CreateTopics/CreatePartitions/DeleteTopics: True when it must be answered
    THROTTLING_QUOTA_EXCEEDED (a strict version and the client's mutation credit already overdrawn)."""
    if quotas is None or request.api_version < _STRICT_FROM.get(ApiKey(request.api_key), 1 << 15):
        return False
    throttle = quotas.mutation_throttle_ms(user_of(client), client.client_id, now_ms)
    if throttle > 0:
        client.throttle_ms = max(client.throttle_ms, throttle)
        return True
    return False


def record_mutation(quotas: QuotaManager | None, client: ClientInfo, partitions: int, now_ms: int) -> None:
    """After one topic's partitions were created or deleted: spend them from the client's credit."""
    if quotas is None or partitions <= 0:
        return
    throttle = quotas.record_mutations(user_of(client), client.client_id, partitions, now_ms)
    client.throttle_ms = max(client.throttle_ms, throttle)


def _empty_fetch(request: ParsedRequest, reply: RawResponse, throttle_ms: int) -> RawResponse:
    """The throttled answer: no data, the throttle time, the fetch session kept."""
    session_id = 0
    first = reply.parts[0]
    if request.api_version >= 7 and isinstance(first, bytes):
        base = 8 + (1 if request.api_version >= _FLEXIBLE_FETCH else 0)
        if len(first) >= base + 10:
            (session_id,) = _I32.unpack_from(first, base + 6)
    reply.close()
    return encode_fetch_response(request.api_version, request.correlation_id, [], throttle_time_ms=throttle_ms,
                                 session_id=session_id)


#: A connection rate's throttling as two counters: new connections made to wait (or, for ip quotas,
#: held and closed unserved) and the throttle time they got.
Throttled = ConnectionCreationRate | IpConnectionRates | ListenerConnectionRate


def _throttle_figures(count_name: str, count_doc: str, time_name: str, time_doc: str) -> list[Figure[Throttled]]:
    return [Figure(CounterMetricFamily, count_name, count_doc, lambda r: r.throttled_total),
            Figure(CounterMetricFamily, time_name, time_doc, lambda r: r.throttle_time_ms_total)]


_LISTENER_THROTTLES = _throttle_figures(
    "tierlog_listener_connections_accept_throttled", "New connections of a listener made to wait before being "
    "served, for going over the broker's or the listener's max.connection.creation.rate.",
    "tierlog_listener_connection_accept_throttle_time_ms", "How long those connections waited, in ms (Kafka's "
    "per-listener connection-accept-throttle-time).")
_BROKER_THROTTLES = _throttle_figures(
    "tierlog_connections_accept_throttled", "New connections made to wait before being served for going over "
    "max.connection.creation.rate.",
    "tierlog_connection_accept_throttle_time_ms", "How long those connections waited, in ms (Kafka's "
    "connection-accept-throttle-time).")
_IP_THROTTLES = _throttle_figures(
    "tierlog_ip_connections_throttled", "New connections held and closed unserved for going over their address's "
    "connection_creation_rate (ip quotas).",
    "tierlog_ip_connection_throttle_time_ms", "Throttle time given to those connections, in ms (Kafka's "
    "ip-connection-accept-throttle-time).")


def quota_metrics(quotas: QuotaManager | None, connection_rates: IpConnectionRates | None = None,
                  broker_rate: ConnectionCreationRate | None = None,
                  listener_rates: Sequence[ListenerConnectionRate] = ()) -> list[Metric]:
    out: list[Metric] = []
    if listener_rates:
        out += families(_LISTENER_THROTTLES, ["listener"], [([rate.listener], rate) for rate in listener_rates])
    if broker_rate is not None:
        out += families(_BROKER_THROTTLES, [], [([], broker_rate)])
    if connection_rates is not None:
        out += families(_IP_THROTTLES, [], [([], connection_rates)])
    if quotas is None:
        return out
    time_ms = CounterMetricFamily("tierlog_quota_throttle_time_ms", "Throttle time given to clients by client "
                                  "quotas, in ms (Kafka's throttle-time per quota type).", labels=["quota_type"])
    count = CounterMetricFamily("tierlog_quota_throttled_responses", "Responses that carried a throttle time.",
                                labels=["quota_type"])
    for qtype in QuotaType:
        time_ms.add_metric([qtype.value], quotas.throttle_time_ms_total[qtype])
        count.add_metric([qtype.value], quotas.throttled_total[qtype])
    return [*out, time_ms, count]
