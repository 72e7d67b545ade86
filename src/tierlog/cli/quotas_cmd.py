"""``tierlog quotas``: describe and alter client quotas of a running broker over the Kafka protocol
(DescribeClientQuotas, AlterClientQuotas) -- what ``kafka-configs.sh --entity-type users/clients``
does for quotas. librdkafka has no client quota admin API, so this speaks the protocol itself.

An entity is ``--user NAME`` or ``--user-defaults``, ``--client-id NAME`` or ``--client-defaults``,
or one of each (a user's quota for one client id); or ``--ip ADDRESS`` or ``--ip-defaults`` alone.
Keys: producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate; for an
ip, connection_creation_rate.
"""

from __future__ import annotations

import argparse
from typing import Any

from tierlog.cli._kafka import CliError, add_wire_options, command, fail
from tierlog.errors import ErrorCode


def _add_entity_options(p: argparse.ArgumentParser) -> None:
    user = p.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="NAME", help="the user (principal name) the quota is for")
    user.add_argument("--user-defaults", action="store_true", help="the default quota of every user")
    client = p.add_mutually_exclusive_group()
    client.add_argument("--client-id", metavar="ID", help="the client id the quota is for")
    client.add_argument("--client-defaults", action="store_true", help="the default quota of every client id")
    ip = p.add_mutually_exclusive_group()
    ip.add_argument("--ip", metavar="ADDRESS", help="the client address the quota is for (connection_creation_rate)")
    ip.add_argument("--ip-defaults", action="store_true", help="the default quota of every client address")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("quotas", help="describe and alter client quotas",
                       description="Client quotas by user, client id or both, with defaults, like "
                                   "kafka-configs.sh --entity-type users/clients.")
    qsub = p.add_subparsers(dest="quotas_command", metavar="ACTION")
    qsub.required = True
    describe = qsub.add_parser("describe", help="the quotas set, optionally for one entity",
                               description="Every quota set; with --user/--client-id (or the defaults "
                                           "options) only that entity's.")
    _add_entity_options(describe)
    add_wire_options(describe)
    describe.set_defaults(func=run_describe)
    alter = qsub.add_parser("alter", help="set or delete quotas of one entity",
                            description="Set (--add-config) or delete (--delete-config) quota keys of one entity.")
    _add_entity_options(alter)
    alter.add_argument("--add-config", default="", metavar="K=V,...",
                       help="quotas to set, e.g. producer_byte_rate=1048576,request_percentage=50")
    alter.add_argument("--delete-config", default="", metavar="K,...", help="quota keys to delete")
    alter.add_argument("--validate-only", action="store_true", help="check the change, but do not make it")
    add_wire_options(alter)
    alter.set_defaults(func=run_alter)


def entity_of(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    entity: list[tuple[str, str | None]] = []
    if args.user is not None or args.user_defaults:
        entity.append(("user", args.user))
    if args.client_id is not None or args.client_defaults:
        entity.append(("client-id", args.client_id))
    if args.ip is not None or args.ip_defaults:
        if entity:
            raise CliError("--ip/--ip-defaults cannot be combined with a user or client id (Kafka's rule)")
        entity.append(("ip", args.ip))
    return entity


def entity_text(entity: list[tuple[str, str | None]]) -> str:
    """Kafka's ClientQuotaEntity names: user-principal 'alice', client-id 'c', the default as <default>."""
    names = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
    ordered = sorted(entity, key=lambda part: part[0] != "user")  # the user first, as Kafka prints it
    return ", ".join(f"{names.get(t, t)} {'<default>' if n is None else repr(n)}" for t, n in ordered)


def parse_ops(add: str, delete: str) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    for item in filter(None, (s.strip() for s in add.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--add-config {item!r} is not KEY=VALUE")
        try:
            ops.append({"key": key.strip(), "value": float(value), "remove": False})
        except ValueError:
            raise CliError(f"--add-config {key}: {value!r} is not a number") from None
    for key in filter(None, (s.strip() for s in delete.split(","))):
        ops.append({"key": key, "value": 0.0, "remove": True})
    if not ops:
        raise CliError("nothing to alter: give --add-config and/or --delete-config")
    return ops


def _error_text(code: int, message: str | None) -> str:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else f"error {code}"
    return f"{message} [{name}]" if message else name


@command
def run_describe(args: argparse.Namespace) -> int:
    from tierlog.cli._wire import wire_client
    from tierlog.protocol import ApiKey

    entity = entity_of(args)
    components = [{"entity_type": t, "match_type": 1 if n is None else 0, "match": n} for t, n in entity]
    with wire_client(args) as client:
        response = client.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, {"components": components, "strict": bool(entity)})
    if int(response.error_code) != ErrorCode.NONE:
        return fail(_error_text(int(response.error_code), response.error_message))
    for entry in response.entries or ():
        parts = [(str(e.entity_type), e.entity_name) for e in entry.entity]
        values = ",".join(f"{v.key}={float(v.value):g}" for v in entry.values)
        print(f"Quota configs for {entity_text(parts)} are {values}")
    return 0


@command
def run_alter(args: argparse.Namespace) -> int:
    from tierlog.cli._wire import wire_client
    from tierlog.protocol import ApiKey

    entity = entity_of(args)
    if not entity:
        raise CliError("name the entity: --user/--user-defaults and/or --client-id/--client-defaults, or "
                       "--ip/--ip-defaults")
    ops = parse_ops(args.add_config, args.delete_config)
    with wire_client(args) as client:
        response = client.call(ApiKey.ALTER_CLIENT_QUOTAS, {"validate_only": args.validate_only, "entries": [
            {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity], "ops": ops}]})
    for entry in response.entries:
        if int(entry.error_code) != ErrorCode.NONE:
            return fail(_error_text(int(entry.error_code), entry.error_message))
    verb = "can be altered" if args.validate_only else "Completed updating config"
    print(f"{verb} for {entity_text(entity)}.")
    return 0
