"""Request handlers, one module per API family. Each module exports ``HANDLERS``: API key → handler."""

from __future__ import annotations

from collections.abc import Mapping

from tierlog.server.context import Handler
from tierlog.server.handlers import (
    acls,
    api_versions,
    configs,
    consumer_groups,
    features,
    fetch,
    groups,
    log_dirs,
    metadata,
    offsets,
    produce,
    producer_ids,
    quotas,
    sasl,
    scram_credentials,
    share_state,
    topic_partitions,
    topics,
    transactions,
)


def all_handlers() -> Mapping[int, Handler]:
    table: dict[int, Handler] = {}
    for module in (api_versions, metadata, produce, fetch, offsets, producer_ids, topics, configs, groups,
                   consumer_groups, features, transactions, sasl, scram_credentials, acls, quotas, topic_partitions,
                   log_dirs, share_state):
        for api_key, handler in module.HANDLERS.items():
            assert api_key not in table, f"two handlers for API {api_key}"
            table[int(api_key)] = handler
    return table


__all__ = ["all_handlers"]
