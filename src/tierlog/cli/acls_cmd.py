"""``tierlog acls list|add|remove``: a running broker's ACLs over the Kafka protocol (DescribeAcls,
CreateAcls, DeleteAcls) -- what ``kafka-acls.sh`` does, with its options' names and its output.

Client security settings as for every client command: ``-X security.protocol=SASL_SSL -X ...``.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import confluent_kafka.admin as _admin_module

from tierlog.cli._kafka import CliError, add_connection_options, admin_client, command, result, results
from tierlog.metadata.acls import CLUSTER_NAME

#: confluent-kafka's ACL classes (its admin package does not declare them exported).
_ck: Any = _admin_module

_RESOURCE_OPTIONS = (("topic", "TOPIC"), ("group", "GROUP"), ("transactional_id", "TRANSACTIONAL_ID"),
                     ("delegation_token", "DELEGATION_TOKEN"), ("user_principal", "USER"))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("acls", help="list, add and remove ACLs",
                       description="Manage the ACLs of a running broker (authorizer.class.name set) over the Kafka "
                                   "protocol, like kafka-acls.sh.")
    asub = p.add_subparsers(dest="acls_command", metavar="ACTION")
    asub.required = True
    for name, func, text in (("list", run_list, "the ACLs matching the resource and principal given (all by default)"),
                             ("add", run_add, "add ALLOW and DENY ACLs"),
                             ("remove", run_remove, "remove the ACLs matching the options given")):
        q = asub.add_parser(name, help=text, description=text)
        _resource_options(q)
        if name == "list":
            q.add_argument("--principal", help="only the ACLs of this principal (User:name)")
        else:
            q.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                           help="User:name to ALLOW (repeatable; User:* for everyone)")
            q.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL",
                           help="User:name to DENY (repeatable)")
            q.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                           help="the client address the ALLOW applies from (default *: any)")
            q.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                           help="the client address the DENY applies from (default *: any)")
            q.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                           help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                                "AlterConfigs, IdempotentWrite, All (repeatable; add needs one, remove defaults "
                                "to any)")
        add_connection_options(q)
        q.set_defaults(func=func)


def _resource_options(q: argparse.ArgumentParser) -> None:
    q.add_argument("--topic", action="append", default=[], help="a topic (repeatable; * for every topic)")
    q.add_argument("--group", action="append", default=[], help="a consumer group (repeatable)")
    q.add_argument("--transactional-id", action="append", default=[], help="a transactional id (repeatable)")
    q.add_argument("--delegation-token", action="append", default=[], help="a delegation token id (repeatable)")
    q.add_argument("--user-principal", action="append", default=[], help="a user resource (repeatable)")
    q.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
    q.add_argument("--resource-pattern-type", default=None,
                   choices=["literal", "prefixed", "match", "any"],
                   help="how the resource names match: literal (add's default), prefixed, or for list/remove "
                        "match (every ACL that applies to the name) and any (list's default)")


def _resources(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    out = [(rtype, name) for attr, rtype in _RESOURCE_OPTIONS for name in getattr(args, attr)]
    if args.cluster:
        out.append(("CLUSTER", CLUSTER_NAME))
    return out


def _operation(name: str) -> Any:

    # Kafka's tool spells them ClusterAction; READ and cluster_action are accepted too.
    key = name.upper() if name.isupper() or "_" in name else re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()
    try:
        return _ck.AclOperation[key]
    except KeyError:
        names = ", ".join(o.name for o in _ck.AclOperation if o.name not in ("UNKNOWN", "ANY"))
        raise CliError(f"unknown operation {name!r} (one of {names})") from None


def _entries(args: argparse.Namespace) -> list[tuple[str, str, Any]]:
    """(principal, host, permission) of each --allow/--deny principal, with every host given for it."""

    out = []
    for principals, hosts, perm in ((args.allow_principal, args.allow_host, _ck.AclPermissionType.ALLOW),
                                    (args.deny_principal, args.deny_host, _ck.AclPermissionType.DENY)):
        for principal in principals:
            if ":" not in principal:
                raise CliError(f"principal {principal!r} is not TYPE:NAME (e.g. User:alice)")
            for host in hosts or ["*"]:
                out.append((principal, host, perm))
    return out


def _format(binding: Any) -> tuple[str, str]:
    resource = (f"ResourcePattern(resourceType={binding.restype.name}, name={binding.name}, "
                f"patternType={binding.resource_pattern_type.name})")
    entry = (f"(principal={binding.principal}, host={binding.host}, operation={binding.operation.name}, "
             f"permissionType={binding.permission_type.name})")
    return resource, entry


def _print(bindings: list[Any]) -> None:
    by_resource: dict[str, list[str]] = {}
    for b in bindings:
        resource, entry = _format(b)
        by_resource.setdefault(resource, []).append(entry)
    for resource, entries in sorted(by_resource.items()):
        print(f"Current ACLs for resource `{resource}`: ")
        for entry in sorted(entries):
            print(f" \t{entry} ")
        print()


def _pattern(args: argparse.Namespace, default: str) -> Any:

    return _ck.ResourcePatternType[(args.resource_pattern_type or default).upper()]


@command
def run_list(args: argparse.Namespace) -> int:

    admin = admin_client(args)
    resources: list[tuple[str, str | None]] = _resources(args) or [("ANY", None)]
    found: list[Any] = []
    for rtype, name in resources:
        flt = _ck.AclBindingFilter(_ck.ResourceType[rtype], name, _pattern(args, "any"), args.principal, None,
                               _ck.AclOperation.ANY, _ck.AclPermissionType.ANY)
        found += result(admin.describe_acls(flt), args, "list ACLs")
    _print(list({str(b): b for b in found}.values()))
    return 0


@command
def run_add(args: argparse.Namespace) -> int:

    resources = _resources(args)
    entries = _entries(args)
    if not resources or not entries or not args.operation:
        raise CliError("add needs a resource (--topic, --group, --cluster, ...), an --allow-principal or "
                       "--deny-principal, and an --operation")
    pattern = _pattern(args, "literal")
    bindings = [_ck.AclBinding(_ck.ResourceType[rtype], name, pattern, principal, host, _operation(op), perm)
                for rtype, name in resources for principal, host, perm in entries for op in args.operation]
    admin = admin_client(args)
    _, failures = results(admin.create_acls(bindings), args, lambda b: f"add {' '.join(_format(b))}")
    for f in failures:
        print(f"error: {f}")
    if failures:
        return 1
    print(f"Adding ACLs for resource(s): {len(bindings)} ACL(s) added")
    _print(bindings)
    return 0


@command
def run_remove(args: argparse.Namespace) -> int:

    resources = _resources(args)
    if not resources:
        raise CliError("remove needs a resource (--topic, --group, --cluster, ...)")
    pattern = _pattern(args, "literal")
    ops = [_operation(op) for op in args.operation] or [_ck.AclOperation.ANY]
    entries: list[tuple[str | None, str | None, Any]] = list(_entries(args)) or [(None, None, _ck.AclPermissionType.ANY)]
    filters = [_ck.AclBindingFilter(_ck.ResourceType[rtype], name, pattern, principal, None if host == "*" else host, op, perm)
               for rtype, name in resources for principal, host, perm in entries for op in ops]
    admin = admin_client(args)
    removed_by, failures = results(admin.delete_acls(filters), args, lambda _f: "remove ACLs")
    removed = [b for bindings in removed_by.values() for b in bindings]
    for f in failures:
        print(f"error: {f}")
    print(f"Removed {len(removed)} ACL(s)")
    _print(removed)
    return 1 if failures else 0
