"""Client quota rules on the metadata image: which entities and keys are valid (Kafka's
QuotaConfigs and ClientQuotaControlManager), which stored entities a DescribeClientQuotas filter
matches (ClientQuotasImage.describe), and the quota that applies to a (user, client id) pair with
Kafka's precedence (ClientQuotaManager's DefaultQuotaCallback). Pure functions of the image.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from tierlog.metadata.image import QuotaEntity, quota_entity

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

#: Kafka's quota keys for user/client-id entities and whether each is a whole number (LONG).
CLIENT_QUOTA_KEYS: Mapping[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
IP_QUOTA_KEYS: Mapping[str, bool] = {CONNECTION_CREATION_RATE: True}

#: DescribeClientQuotas match types (Kafka's ClientQuotaFilterComponent).
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


class InvalidQuotaRequest(ValueError):
    """Kafka answers these with INVALID_REQUEST and the message."""


def validate_entity(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The canonical entity of an AlterClientQuotas entry, or InvalidQuotaRequest."""
    entity: dict[str, str | None] = {}
    for entity_type, name in parts:
        if entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidQuotaRequest(f"Unhandled client quota entity type: {entity_type}")
        if entity_type in entity:
            raise InvalidQuotaRequest(f"Duplicate {entity_type} entity type in client quota entity")
        if name is not None and name == "":
            raise InvalidQuotaRequest(f"Empty {entity_type} name in client quota entity")
        entity[entity_type] = name
    if not entity:
        raise InvalidQuotaRequest("Invalid empty client quota entity")
    if IP in entity and len(entity) > 1:
        raise InvalidQuotaRequest("Invalid quota entity combination, IP entity should not be combined with "
                                  "User or ClientId entity.")
    return quota_entity(entity.items())


def validate_op(entity: QuotaEntity, key: str, value: float, remove: bool) -> None:
    keys = IP_QUOTA_KEYS if entity[0][0] == IP else CLIENT_QUOTA_KEYS
    whole = keys.get(key)
    if whole is None:
        raise InvalidQuotaRequest(f"Invalid configuration key {key}")
    if remove:
        return
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise InvalidQuotaRequest(f"Invalid value {value} for configuration key {key}: it must be positive")
    if whole and value != math.floor(value):
        raise InvalidQuotaRequest(f"Configuration {key} must be a Long value")


@dataclass(frozen=True, slots=True)
class QuotaFilter:
    entity_type: str
    match_type: int
    match: str | None


def validate_filter(components: Iterable[QuotaFilter]) -> list[QuotaFilter]:
    seen: set[str] = set()
    out = []
    for c in components:
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidQuotaRequest(f"Invalid entity type {c.entity_type}")
        if c.entity_type in seen:
            raise InvalidQuotaRequest(f"Entity type {c.entity_type} cannot appear more than once in the filter.")
        seen.add(c.entity_type)
        if c.match_type == MATCH_EXACT and c.match is None:
            raise InvalidQuotaRequest(f"Request specified exact match for {c.entity_type} but no name")
        if c.match_type == MATCH_DEFAULT and c.match is not None:
            raise InvalidQuotaRequest(f"Request specified default match for {c.entity_type} with a name")
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise InvalidQuotaRequest(f"Unknown match type {c.match_type}")
        out.append(c)
    if IP in seen and len(seen) > 1:
        raise InvalidQuotaRequest("Invalid entity filter component combination, IP filter component should "
                                  "not be used with User or ClientId filter component.")
    return out


def describe(quotas: Mapping[QuotaEntity, Mapping[str, float]], components: list[QuotaFilter],
             strict: bool) -> Iterator[tuple[QuotaEntity, Mapping[str, float]]]:
    """The stored entities the filter matches: every component must match one of the entity's parts;
    ``strict`` also refuses entities with parts no component names."""
    for entity, values in quotas.items():
        parts = dict(entity)
        if strict and len(parts) != len(components):
            continue
        ok = True
        for c in components:
            if c.entity_type not in parts:
                ok = False
                break
            name = parts[c.entity_type]
            if ((c.match_type == MATCH_EXACT and name != c.match) or (c.match_type == MATCH_DEFAULT and name is not None)
                    or (c.match_type == MATCH_SPECIFIED and name is None)):
                ok = False
                break
        if ok:
            yield entity, values


def precedence(user: str | None, client_id: str) -> list[QuotaEntity]:
    """Kafka's order of the entities a (user, client id) pair's quota comes from, first match wins:
    /users/<u>/clients/<c>, /users/<u>/clients/<default>, /users/<u>, /users/<default>/clients/<c>,
    /users/<default>/clients/<default>, /users/<default>, /clients/<c>, /clients/<default>.
    ``user`` None (an unauthenticated connection) skips the user levels."""
    order: list[QuotaEntity] = []
    if user is not None:
        order += [((CLIENT_ID, client_id), (USER, user)), ((CLIENT_ID, None), (USER, user)), ((USER, user),),
                  ((CLIENT_ID, client_id), (USER, None)), ((CLIENT_ID, None), (USER, None)), ((USER, None),)]
    order += [((CLIENT_ID, client_id),), ((CLIENT_ID, None),)]
    return order


def resolve(quotas: Mapping[QuotaEntity, Mapping[str, float]], user: str | None, client_id: str,
            key: str) -> tuple[QuotaEntity, float] | None:
    """The entity whose quota for ``key`` applies to the pair, and the quota; None: unlimited.

    Kafka applies the first entity in precedence order that has *this key* set, and the quota is
    shared by every client that resolves to that entity (its metric tags)."""
    for entity in precedence(user, client_id):
        values = quotas.get(entity)
        if values is not None and key in values:
            return entity, values[key]
    return None
