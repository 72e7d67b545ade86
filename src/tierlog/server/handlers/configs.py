"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics, this broker and groups.

Changes go through the metadata controller (validated against the one definition of each key, then
recorded as ConfigRecords); the log sync applies them to open logs. Describing reports each key's
effective value and where it comes from, with Kafka's ConfigSource ids.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from typing import Any

from tierlog.config.definition import ConfigKey, Type, Value
from tierlog.config.group_keys import GROUP_DEF
from tierlog.config.keys import BROKER_DEF, TOPIC_DEF
from tierlog.config.log_config import LogConfig
from tierlog.config.security_keys import LISTENER_PREFIX, RECONFIGURABLE_TLS_KEYS
from tierlog.errors import ConfigError, ErrorCode, TierlogError
from tierlog.metadata import AlterConfigOp, AlterConfigOpType, ConfigResourceType
from tierlog.metadata.acls import AclOperation, ResourceType
from tierlog.metadata.configs import apply_ops, canonical_configs
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext
from tierlog.server.log_sync import effective_topic_defaults

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource ids."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


# Kafka's DescribeConfigsResponse.ConfigType ids.
_CONFIG_TYPES = {Type.BOOLEAN: 1, Type.STRING: 2, Type.INT: 3, Type.LONG: 5, Type.DOUBLE: 6, Type.LIST: 7,
                 Type.PASSWORD: 9}


def format_value(value: Value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def _entry(key: ConfigKey, value: str | None, source: ConfigSource, *, read_only: bool,
           synonyms: list[dict[str, Any]], include_docs: bool) -> dict[str, Any]:
    sensitive = key.type is Type.PASSWORD
    return {
        "name": key.name,
        "value": None if sensitive else value,
        "read_only": read_only,
        "config_source": int(source),
        "is_sensitive": sensitive,
        "synonyms": synonyms,
        "config_type": _CONFIG_TYPES.get(key.type, 0),
        "documentation": key.doc if include_docs else None,
    }


def topic_config_entries(ctx: BrokerContext, overrides: Mapping[str, str], wanted: set[str] | None = None, *,
                         include_synonyms: bool = False, include_docs: bool = False) -> list[dict[str, Any]]:
    """Every topic key's effective value given the topic's ``overrides`` (canonical names), with
    Kafka's synonym list: the topic override, then each broker synonym as set dynamically for this
    broker, dynamically cluster-wide and in server.properties, then the default. The first entry is
    the value in force and its source."""
    image = ctx.image
    layers = ((ConfigSource.DYNAMIC_BROKER_CONFIG, image.broker_configs(str(ctx.node_id))),
              (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, image.broker_configs("")))
    defaults = effective_topic_defaults(ctx.config, image, ctx.node_id)
    effective = LogConfig.from_props(dict(overrides), defaults).to_props()
    out: list[dict[str, Any]] = []
    for name, key in sorted(TOPIC_DEF.keys.items()):
        if wanted is not None and name not in wanted and not (set(key.aliases) & wanted):
            continue
        synonyms: list[dict[str, Any]] = []
        if name in overrides:
            synonyms.append({"name": name, "value": overrides[name], "source": int(ConfigSource.DYNAMIC_TOPIC_CONFIG)})
        for syn, _ in key.broker_synonyms:
            for source, layer in layers:
                if syn in layer:
                    synonyms.append({"name": syn, "value": layer[syn], "source": int(source)})
            if ctx.config.is_set(syn):
                synonyms.append({"name": syn, "value": format_value(ctx.config.get(syn)),
                                 "source": int(ConfigSource.STATIC_BROKER_CONFIG)})
        source = ConfigSource(synonyms[0]["source"]) if synonyms else ConfigSource.DEFAULT_CONFIG
        synonyms.append({"name": name, "value": format_value(key.default), "source": int(ConfigSource.DEFAULT_CONFIG)})
        value = overrides[name] if name in overrides else effective.get(name, format_value(key.default))
        out.append(_entry(key, value, source, read_only=False, synonyms=synonyms if include_synonyms else [],
                          include_docs=include_docs))
    return out


def group_config_entries(ctx: BrokerContext, overrides: Mapping[str, str], wanted: set[str] | None, *,
                         include_synonyms: bool, include_docs: bool) -> list[dict[str, Any]]:
    """Every group key's value for a group with ``overrides``, as Kafka's ConfigHelper describes a GROUP
    resource: the group's own value (GROUP_CONFIG), else its broker synonym's (set in server.properties,
    else that key's default); a key without a broker synonym falls back to its own default."""
    out: list[dict[str, Any]] = []
    for name, key in GROUP_DEF.keys.items():
        if wanted is not None and name not in wanted:
            continue
        synonyms: list[dict[str, Any]] = []
        if name in overrides:
            synonyms.append({"name": name, "value": overrides[name], "source": int(ConfigSource.GROUP_CONFIG)})
        for syn, _ in key.broker_synonyms:
            if ctx.config.is_set(syn):
                synonyms.append({"name": syn, "value": format_value(ctx.config.get(syn)),
                                 "source": int(ConfigSource.STATIC_BROKER_CONFIG)})
            synonyms.append({"name": syn, "value": format_value(BROKER_DEF.require(syn).default),
                             "source": int(ConfigSource.DEFAULT_CONFIG)})
        if not key.broker_synonyms:
            synonyms.append({"name": name, "value": format_value(key.default),
                             "source": int(ConfigSource.DEFAULT_CONFIG)})
        value = overrides[name] if name in overrides else synonyms[0]["value"]
        out.append(_entry(key, value, ConfigSource(synonyms[0]["source"]), read_only=False,
                          synonyms=synonyms if include_synonyms else [], include_docs=include_docs))
    return out


def broker_config_entries(ctx: BrokerContext, resource_name: str, wanted: set[str] | None, *,
                          include_synonyms: bool, include_docs: bool) -> list[dict[str, Any]]:
    image = ctx.image
    per_broker = image.broker_configs(str(ctx.node_id)) if resource_name else {}
    cluster = image.broker_configs("")
    out: list[dict[str, Any]] = []
    for name, key in sorted(BROKER_DEF.keys.items()):
        if key.internal or (wanted is not None and name not in wanted):
            continue
        layers: list[tuple[ConfigSource, str | None]] = []
        if name in per_broker:
            layers.append((ConfigSource.DYNAMIC_BROKER_CONFIG, per_broker[name]))
        if name in cluster:
            layers.append((ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, cluster[name]))
        if not resource_name:
            # The cluster-default resource lists only the keys set on it (as Kafka does).
            if not layers:
                continue
        else:
            if ctx.config.is_set(name):
                layers.append((ConfigSource.STATIC_BROKER_CONFIG, format_value(ctx.config.get(name))))
            layers.append((ConfigSource.DEFAULT_CONFIG, format_value(key.default)))
        source, value = layers[0]
        synonyms = [{"name": name, "value": v, "source": int(s)} for s, v in layers] if include_synonyms else []
        out.append(_entry(key, value, source, read_only=not key.dynamic, synonyms=synonyms, include_docs=include_docs))
    # Per-listener keys set dynamically (listener.name.<l>.ssl.keystore.location ...), as Kafka lists them:
    # on a broker its own, on the cluster-default resource the cluster-wide ones.
    source = ConfigSource.DYNAMIC_BROKER_CONFIG if resource_name else ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    for name, value in sorted((per_broker if resource_name else cluster).items()):
        if not name.startswith(LISTENER_PREFIX) or (wanted is not None and name not in wanted):
            continue
        inner = BROKER_DEF.find(name[len(LISTENER_PREFIX):].partition(".")[2])
        if inner is None:
            continue
        entry = _entry(inner, value, source, read_only=False, include_docs=include_docs,
                       synonyms=[{"name": name, "value": None if inner.type is Type.PASSWORD else value,
                                  "source": int(source)}] if include_synonyms else [])
        entry["name"] = name
        out.append(entry)
    return out


def _broker_name_error(ctx: BrokerContext, resource_name: str) -> str | None:
    if resource_name in ("", str(ctx.node_id)):
        return None
    return f"Unexpected broker id, expected {ctx.node_id} or empty string, but received {resource_name}"


def _config_refusal(ctx: BrokerContext, client: ClientInfo, op: AclOperation, rtype: int, rname: str) -> int:
    """Kafka's check: ``op`` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on the topic, or on the cluster for a
    broker or broker logger; the error code when refused, else 0."""
    if rtype == TOPIC:
        return 0 if ctx.allowed(client, op, ResourceType.TOPIC, rname) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if rtype in (BROKER, BROKER_LOGGER):
        return 0 if ctx.allowed(client, op) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if rtype == GROUP:
        return 0 if ctx.allowed(client, op, ResourceType.GROUP, rname) else ErrorCode.GROUP_AUTHORIZATION_FAILED
    return 0


async def handle_describe_configs(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    include_synonyms = bool(getattr(body, "include_synonyms", False))
    include_docs = bool(getattr(body, "include_documentation", False))
    results: list[dict[str, Any]] = []
    for resource in body.resources:
        rtype, rname = resource.resource_type, resource.resource_name
        wanted = None if resource.configuration_keys is None else set(resource.configuration_keys)
        result: dict[str, Any] = {"resource_type": rtype, "resource_name": rname, "error_code": ErrorCode.NONE,
                                  "error_message": None, "configs": []}
        results.append(result)
        refusal = _config_refusal(ctx, client, AclOperation.DESCRIBE_CONFIGS, rtype, rname)
        if refusal:
            result.update(error_code=refusal, error_message=None)
            continue
        if rtype == TOPIC:
            image = ctx.image
            if rname not in image.topics_by_name:
                result.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"Topic {rname} does not exist")
                continue
            result["configs"] = topic_config_entries(ctx, image.topic_configs(rname), wanted,
                                                     include_synonyms=include_synonyms, include_docs=include_docs)
        elif rtype == BROKER:
            message = _broker_name_error(ctx, rname)
            if message is not None:
                result.update(error_code=ErrorCode.INVALID_REQUEST, error_message=message)
                continue
            result["configs"] = broker_config_entries(ctx, rname, wanted, include_synonyms=include_synonyms,
                                                      include_docs=include_docs)
        elif rtype == BROKER_LOGGER:
            continue  # no per-logger levels to report
        elif rtype == GROUP:
            # A group with no configs set, or no group at all, is described with every default (as Kafka).
            if not rname:
                result.update(error_code=ErrorCode.INVALID_REQUEST, error_message="Group name must not be empty")
                continue
            result["configs"] = group_config_entries(ctx, ctx.image.group_configs(rname), wanted,
                                                     include_synonyms=include_synonyms, include_docs=include_docs)
        else:
            result.update(error_code=ErrorCode.INVALID_REQUEST, error_message=f"Unsupported resource type {rtype}")
    return build_response(ApiKey.DESCRIBE_CONFIGS, request.api_version, {"results": results})


def _resource_type(ctx: BrokerContext, rtype: int, rname: str) -> ConfigResourceType:
    if rtype == TOPIC:
        return ConfigResourceType.TOPIC
    if rtype == BROKER:
        message = _broker_name_error(ctx, rname)
        if message is not None:
            raise _RequestError(message)
        return ConfigResourceType.BROKER
    if rtype == GROUP:
        return ConfigResourceType.GROUP
    raise _RequestError(f"Unsupported resource type {rtype}")


class _RequestError(TierlogError):
    error_code = ErrorCode.INVALID_REQUEST


def _is_tls_key(name: str) -> bool:
    if name.startswith(LISTENER_PREFIX):
        name = name[len(LISTENER_PREFIX):].partition(".")[2]
    return name in RECONFIGURABLE_TLS_KEYS


def _check_tls_change(ctx: BrokerContext, rname: str, names: list[str], new: Callable[[], Mapping[str, str]]) -> None:
    """Kafka's dynamic keystore rules before anything is recorded: the TLS keys only per broker, and the
    keystore/truststore they lead to must load and fit the old certificate (SslFactory's checks); a
    failure is INVALID_REQUEST with the reason, as Kafka answers it (KAFKA-13609), and nothing changes."""
    tls = [n for n in names if _is_tls_key(n)]
    if not tls:
        return
    if not rname:
        raise _RequestError(f"Cannot update these configs at default cluster level, broker id must be specified: "
                            f"{', '.join(tls)}")
    if ctx.tls_check is not None:
        try:
            ctx.tls_check(new())
        except ConfigError as e:
            raise _RequestError(str(e)) from None


async def handle_alter_configs(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    responses: list[dict[str, Any]] = []
    for resource in body.resources:
        entry: dict[str, Any] = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                                 "error_code": ErrorCode.NONE, "error_message": None}
        responses.append(entry)
        refusal = _config_refusal(ctx, client, AclOperation.ALTER_CONFIGS, resource.resource_type,
                                  resource.resource_name)
        if refusal:
            entry["error_code"] = refusal
            continue
        try:
            rtype = _resource_type(ctx, resource.resource_type, resource.resource_name)
            configs = {c.name: c.value for c in resource.configs}
            if rtype == ConfigResourceType.BROKER:
                _check_tls_change(ctx, resource.resource_name, list(configs),
                                  functools.partial(canonical_configs, ConfigResourceType.BROKER, configs))
            await ctx.io.run(ctx.controller.alter_configs, rtype, resource.resource_name, configs,
                             validate_only=body.validate_only)
        except TierlogError as e:
            entry.update(error_code=e.error_code, error_message=str(e))
    return build_response(ApiKey.ALTER_CONFIGS, request.api_version, {"responses": responses})


async def handle_incremental_alter_configs(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    responses: list[dict[str, Any]] = []
    for resource in body.resources:
        entry: dict[str, Any] = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                                 "error_code": ErrorCode.NONE, "error_message": None}
        responses.append(entry)
        refusal = _config_refusal(ctx, client, AclOperation.ALTER_CONFIGS, resource.resource_type,
                                  resource.resource_name)
        if refusal:
            entry["error_code"] = refusal
            continue
        try:
            rtype = _resource_type(ctx, resource.resource_type, resource.resource_name)
            try:
                ops = [AlterConfigOp(c.name, AlterConfigOpType(c.config_operation), c.value) for c in resource.configs]
            except ValueError as e:
                raise _RequestError(f"Unknown config operation: {e}") from None
            if rtype == ConfigResourceType.BROKER:
                current = ctx.image.broker_configs(resource.resource_name)
                _check_tls_change(ctx, resource.resource_name, [op.name for op in ops],
                                  functools.partial(apply_ops, ConfigResourceType.BROKER, current, ops))
            await ctx.io.run(ctx.controller.incremental_alter_configs, rtype, resource.resource_name, ops,
                             validate_only=body.validate_only)
        except TierlogError as e:
            entry.update(error_code=e.error_code, error_message=str(e))
    return build_response(ApiKey.INCREMENTAL_ALTER_CONFIGS, request.api_version, {"responses": responses})


CLIENT_METRICS = 16
#: The resource types ListConfigResources lists, per version (Kafka's ListConfigResourcesRequest:
#: v0 was ListClientMetricsResources).
_LISTABLE = {0: (CLIENT_METRICS,), 1: (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)}


async def handle_list_config_resources(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    """Kafka's ListConfigResources (KIP-1142): with DESCRIBE_CONFIGS on the cluster, the config
    resources of each requested type (all listable types when none is named): groups with configs set,
    this broker (as BROKER and BROKER_LOGGER) and every topic; tierlog has no client-metrics
    subscriptions. A type the version does not list: UNSUPPORTED_VERSION."""
    def answer(error_code: int, resources: list[dict[str, Any]]) -> Reply:
        return build_response(ApiKey.LIST_CONFIG_RESOURCES, request.api_version,
                              {"error_code": error_code, "config_resources": resources})

    if not ctx.allowed(client, AclOperation.DESCRIBE_CONFIGS):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    listable = _LISTABLE[min(request.api_version, 1)]
    wanted = list(getattr(request.body, "resource_types", ()) or listable)
    if any(t not in listable for t in wanted):
        return answer(ErrorCode.UNSUPPORTED_VERSION, [])
    image = ctx.image
    resources: list[dict[str, Any]] = []
    # Kafka's order: groups, client metrics, broker loggers, brokers, topics.
    if GROUP in wanted:
        resources += [{"resource_name": name, "resource_type": GROUP}
                      for (rtype, name), configs in sorted(image.configs.items())
                      if rtype == ConfigResourceType.GROUP and configs]
    for rtype in (BROKER_LOGGER, BROKER):
        if rtype in wanted:
            resources.append({"resource_name": str(ctx.node_id), "resource_type": rtype})
    if TOPIC in wanted:
        resources += [{"resource_name": name, "resource_type": TOPIC} for name in sorted(image.topics_by_name)]
    return answer(ErrorCode.NONE, resources)


HANDLERS = {
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.LIST_CONFIG_RESOURCES: handle_list_config_resources,
}
