"""Building kio messages of any version from one version-agnostic description.

A handler describes its response once, with plain values in the newest shape::

    build_response(ApiKey.METADATA, version, {
        "brokers": [{"node_id": 1, "host": "localhost", "port": 9092}],
        "topics": [{"error_code": 0, "name": "t", "topic_id": tid, "partitions": [...]}],
    })

and this module turns it into the kio dataclasses of the requested version, the way Kafka's
generated Java builders work: a field the version lacks is dropped, a field left out takes Kafka's
default (0, "", empty array, null for nullable fields, -1 where the schema says so), nested
mappings become the version's nested classes, and ints become what kio wants for error codes
(``ErrorCode``), durations (``timedelta``) and timestamps (``datetime``). A key that is no field of
any supported version of the message is a typo and raises :class:`EntityBuildError`.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from tierlog.protocol._decoder import field_shape, is_entity
from tierlog.protocol.apis import (
    RequestBody,
    ResponseBody,
    parsed_api,
    request_type,
    response_type,
)
from tierlog.protocol.errors import EntityBuildError

T = TypeVar("T")

# A coercer turns one handler-supplied value into the field's kio value; ``known`` is the set of
# field names valid anywhere in the message family (None: no typo check).
_Coercer = Callable[[Any, "frozenset[str] | None"], Any]
# Makes the value of a field the caller left out; None when kio's dataclass has its own default.
_Default = Callable[[], Any]
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


def build(entity_type: type[T], values: Mapping[str, Any]) -> T:
    """Build one kio entity (any message or nested struct) from ``values``."""
    return _build(entity_type, values, None)


def build_request(api_key: int, api_version: int, values: Mapping[str, Any]) -> RequestBody:
    return _build(request_type(api_key, api_version), values, _family_names(api_key, True))


def build_response(api_key: int, api_version: int, values: Mapping[str, Any]) -> ResponseBody:
    return _build(response_type(api_key, api_version), values, _family_names(api_key, False))


def to_millis(value: datetime.timedelta) -> int:
    """Milliseconds of a kio duration (kio turns every ``*_ms`` field into a ``timedelta`` and drops
    the suffix from its name: ``max_wait``, ``session_timeout``, ``throttle_time``)."""
    return (value.days * 86_400_000) + (value.seconds * 1000) + (value.microseconds // 1000)


def _build(entity_type: type[T], values: Mapping[str, Any], known: frozenset[str] | None) -> T:
    if not isinstance(values, Mapping):
        raise EntityBuildError(f"{entity_type.__qualname__} needs a mapping, got {type(values).__name__}")
    if known is not None:
        for key in values:
            if key not in known:
                raise EntityBuildError(f"{key!r} is not a field of any version of {entity_type.__qualname__}")
    kwargs: dict[str, Any] = {}
    for name, coerce, implicit in _plan(entity_type):
        if name in values:
            kwargs[name] = coerce(values[name], known)
        elif implicit is not None:
            kwargs[name] = implicit()
    return entity_type(**kwargs)


_Plan = tuple[tuple[str, _Coercer, "_Default | None"], ...]
_PLANS: dict[type[Any], _Plan] = {}


def _plan(entity_type: type[Any]) -> _Plan:
    plan = _PLANS.get(entity_type)
    if plan is None:
        plan = _PLANS[entity_type] = _compile_plan(entity_type)
    return plan


def _compile_plan(entity_type: type[Any]) -> _Plan:
    plan = []
    for field in dataclasses.fields(entity_type):
        coerce, implicit = _field_coercer(entity_type, field)
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        plan.append((field.name, coerce, None if has_default else implicit))
    return tuple(plan)


def _constant(value: Any) -> _Default:
    return lambda: value


def _field_coercer(owner: type[Any], field: dataclasses.Field[Any]) -> tuple[_Coercer, _Default]:
    shape = field_shape(field)
    where = f"{owner.__qualname__}.{field.name}"
    if is_entity(shape.inner):
        item = _entity_coercer(shape.inner, where)
        if shape.array:
            return _array_coercer(item, shape.nullable, where), _constant(None if shape.nullable else ())
        if shape.nullable:
            return _nullable(item), _constant(None)
        nested: type[Any] = shape.inner
        return item, lambda: _build(nested, {}, None)
    kafka_type = field.metadata.get("kafka_type", "")
    if shape.array:
        coerce = _array_coercer(_primitive_coercer(kafka_type, False, where), shape.nullable, where)
        return coerce, _constant(None if shape.nullable else ())
    coerce = _primitive_coercer(kafka_type, shape.nullable, where)
    return coerce, _constant(None if shape.nullable else _implicit_default(kafka_type))


def _entity_coercer(entity_type: type[Any], where: str) -> _Coercer:
    def coerce(value: Any, known: frozenset[str] | None) -> Any:
        if isinstance(value, entity_type):
            return value
        if isinstance(value, Mapping):
            return _build(entity_type, value, known)
        raise EntityBuildError(f"{where}: expected a mapping, got {type(value).__name__}")

    return coerce


def _array_coercer(item: _Coercer, nullable: bool, where: str) -> _Coercer:
    def coerce(value: Any, known: frozenset[str] | None) -> Any:
        if value is None:
            if nullable:
                return None
            raise EntityBuildError(f"{where} is not nullable")
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
            raise EntityBuildError(f"{where}: expected a sequence, got {type(value).__name__}")
        return tuple(item(element, known) for element in value)

    return coerce


def _nullable(inner: _Coercer) -> _Coercer:
    def coerce(value: Any, known: frozenset[str] | None) -> Any:
        return None if value is None else inner(value, known)

    return coerce


def _primitive_coercer(kafka_type: str, nullable: bool, where: str) -> _Coercer:
    def check_null(value: Any) -> bool:
        if value is None:
            if nullable:
                return True
            raise EntityBuildError(f"{where} is not nullable")
        return False

    def error_code(value: Any, known: frozenset[str] | None) -> Any:
        if isinstance(value, ErrorCode) or check_null(value):
            return value
        try:
            return ErrorCode(int(value))
        except (ValueError, TypeError):
            raise EntityBuildError(f"{where}: {value!r} is not a Kafka error code") from None

    def millis(value: Any, known: frozenset[str] | None) -> Any:
        if isinstance(value, datetime.timedelta) or check_null(value):
            return value
        if isinstance(value, int):
            return datetime.timedelta(milliseconds=value)
        raise EntityBuildError(f"{where}: expected milliseconds, got {value!r}")

    def timestamp(value: Any, known: frozenset[str] | None) -> Any:
        if isinstance(value, datetime.datetime) or check_null(value):
            return value
        if isinstance(value, int):
            # kio models "no timestamp" (-1) as None in the nullable timestamp fields.
            if value == -1 and nullable:
                return None
            return _EPOCH + datetime.timedelta(milliseconds=value)
        raise EntityBuildError(f"{where}: expected epoch milliseconds, got {value!r}")

    def uuid_value(value: Any, known: frozenset[str] | None) -> Any:
        if value is None or isinstance(value, uuid.UUID):
            return value
        raise EntityBuildError(f"{where}: expected a UUID, got {type(value).__name__}")

    def text(value: Any, known: frozenset[str] | None) -> Any:
        if isinstance(value, str) or check_null(value):
            return value
        raise EntityBuildError(f"{where}: expected str, got {type(value).__name__}")

    def raw(value: Any, known: frozenset[str] | None) -> Any:
        if isinstance(value, bytes) or check_null(value):
            return value
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        raise EntityBuildError(f"{where}: expected bytes, got {type(value).__name__}")

    def integer(value: Any, known: frozenset[str] | None) -> Any:
        if isinstance(value, int) or check_null(value):
            return value
        raise EntityBuildError(f"{where}: expected int, got {type(value).__name__}")

    def plain(value: Any, known: frozenset[str] | None) -> Any:
        check_null(value)
        return value

    match kafka_type:
        case "error_code":
            return error_code
        case "timedelta_i32" | "timedelta_i64":
            return millis
        case "datetime_i64":
            return timestamp
        case "uuid":
            return uuid_value
        case "string":
            return text
        case "bytes" | "records":
            return raw
        case "int8" | "int16" | "int32" | "int64" | "uint8" | "uint16" | "uint32" | "uint64":
            return integer
        case _:
            return plain


def _implicit_default(kafka_type: str) -> Any:
    match kafka_type:
        case "error_code":
            return ErrorCode.none
        case "timedelta_i32" | "timedelta_i64":
            return datetime.timedelta(0)
        case "datetime_i64":
            return _EPOCH
        case "string":
            return ""
        case "bytes" | "records":
            return b""
        case "bool":
            return False
        case "float64":
            return 0.0
        case "uuid":
            return None
        case _:
            return 0


@cache
def _family_names(api_key: int, request: bool) -> frozenset[str]:
    """Every field name of every supported version of one API's requests or responses."""
    spec = parsed_api(api_key)
    assert spec is not None, f"API {api_key} is neither implemented nor answered"
    names: set[str] = set()
    seen: set[type[Any]] = set()

    def walk(entity_type: type[Any]) -> None:
        if entity_type in seen:
            return
        seen.add(entity_type)
        for field in dataclasses.fields(entity_type):
            names.add(field.name)
            inner = field_shape(field).inner
            if is_entity(inner):
                walk(inner)

    for version in range(spec.min_version, spec.max_version + 1):
        walk(request_type(api_key, version) if request else response_type(api_key, version))
    return frozenset(names)
