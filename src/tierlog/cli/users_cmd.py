"""``tierlog users scram list|set|delete``: SCRAM credentials of a running broker over the Kafka
protocol (DescribeUserScramCredentials, AlterUserScramCredentials) -- what ``kafka-configs.sh
--entity-type users --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'`` does, with
its output lines.

The password never leaves this process: as Kafka's AdminClient, the command makes a random salt and
sends the salted password (PBKDF2 with the mechanism's hash, RFC 5802), from which the broker keeps
only the StoredKey and ServerKey. Give the password with ``--password-file`` or on standard input
(``--password`` works too, but shows in the process list); or Kafka's ``--add-config`` syntax.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from tierlog.cli._kafka import CliError, add_wire_options, command, fail
from tierlog.errors import ErrorCode

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's default iteration count (kafka-configs.sh) and the bounds the broker accepts.
DEFAULT_ITERATIONS = 4096
#: Kafka's ScramFormatter makes salts of this many random bytes' worth.
SALT_BYTES = 32
_ADD_CONFIG_ITEM = re.compile(r"\s*(SCRAM-SHA-\d+)\s*=\s*\[([^\]]*)\]\s*(?:,|$)", re.I)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("users", help="SCRAM credentials of users (list, set, delete)",
                       description="Users' SCRAM credentials, like kafka-configs.sh --entity-type users.")
    usub = p.add_subparsers(dest="users_command", metavar="KIND")
    usub.required = True
    scram = usub.add_parser("scram", help="SCRAM-SHA-256/512 credentials",
                            description="SCRAM-SHA-256 and SCRAM-SHA-512 credentials kept in the metadata log.")
    ssub = scram.add_subparsers(dest="scram_command", metavar="ACTION")
    ssub.required = True
    lst = ssub.add_parser("list", help="users with credentials and their mechanisms and iterations",
                          description="Every user with a SCRAM credential, or those named with --user.")
    lst.add_argument("--user", action="append", default=[], metavar="NAME", help="only this user (repeatable)")
    add_wire_options(lst)
    lst.set_defaults(func=run_list)
    st = ssub.add_parser("set", help="create or replace a user's credential",
                         description="Create or replace the credential of --user for each --mechanism (or as "
                                     "--add-config says). The password comes from --password-file, --password, "
                                     "--add-config or the first line of standard input.")
    st.add_argument("--user", required=True, metavar="NAME")
    st.add_argument("--mechanism", action="append", default=[], type=str.upper, choices=MECHANISMS,
                    help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default SCRAM-SHA-512)")
    st.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                    help=f"PBKDF2 iterations, 4096 to 16384 (default {DEFAULT_ITERATIONS})")
    st.add_argument("--password-file", type=Path, metavar="FILE", help="a file whose first line is the password")
    st.add_argument("--password", help="the password (visible to other users of this machine: prefer a file)")
    st.add_argument("--add-config", metavar="SPEC",
                    help="kafka-configs.sh's form: 'SCRAM-SHA-256=[iterations=8192,password=...],"
                         "SCRAM-SHA-512=[password=...]'")
    add_wire_options(st)
    st.set_defaults(func=run_set)
    de = ssub.add_parser("delete", help="delete a user's credentials",
                         description="Delete the credentials of --user for each --mechanism (default: every "
                                     "mechanism the user has).")
    de.add_argument("--user", required=True, metavar="NAME")
    de.add_argument("--mechanism", action="append", default=[], type=str.upper, choices=MECHANISMS,
                    help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable)")
    add_wire_options(de)
    de.set_defaults(func=run_delete)


def mechanism_id(name: str) -> int:
    from tierlog.server.auth.mechanisms import SCRAM_MECHANISMS

    return SCRAM_MECHANISMS[name].id


def mechanism_name(mechanism: int) -> str:
    from tierlog.server.auth.mechanisms import SCRAM_BY_ID

    found = SCRAM_BY_ID.get(mechanism)
    return found.name if found is not None else f"UNKNOWN({mechanism})"


def parse_add_config(spec: str) -> list[tuple[str, int, str]]:
    """kafka-configs.sh's ``SCRAM-SHA-256=[iterations=8192,password=pw],...`` → (mechanism, iterations, password)."""
    out: list[tuple[str, int, str]] = []
    pos = 0
    while pos < len(spec):
        m = _ADD_CONFIG_ITEM.match(spec, pos)
        if m is None:
            raise CliError(f"--add-config {spec[pos:]!r} is not MECHANISM=[iterations=N,password=...]")
        mech = m.group(1).upper()
        if mech not in MECHANISMS:
            raise CliError(f"--add-config: unknown mechanism {m.group(1)} (one of {', '.join(MECHANISMS)})")
        fields: dict[str, str] = {}
        for part in m.group(2).split(","):
            key, sep, value = part.partition("=")
            if not sep or key.strip() not in ("iterations", "password"):
                raise CliError(f"--add-config {mech}: {part!r} is not iterations=N or password=...")
            fields[key.strip()] = value
        if "password" not in fields:
            raise CliError(f"--add-config {mech}: no password")
        iterations = fields.get("iterations", str(DEFAULT_ITERATIONS)).strip()
        if not iterations.isdigit():
            raise CliError(f"--add-config {mech}: iterations {iterations!r} is not a number")
        out.append((mech, int(iterations), fields["password"]))
        pos = m.end()
    if not out:
        raise CliError("--add-config names no mechanism")
    return out


def _password(args: argparse.Namespace) -> str:
    if args.password_file is not None:
        try:
            lines = args.password_file.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise CliError(f"--password-file {args.password_file}: {e.strerror or e}") from None
        if not lines or not lines[0]:
            raise CliError(f"--password-file {args.password_file} is empty")
        return str(lines[0])
    if args.password is not None:
        return str(args.password)
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        raise CliError("no password: give --password-file, --password, --add-config or a line on standard input")
    return line


def upsertion(user: str, mechanism: str, iterations: int, password: str) -> dict[str, Any]:
    """An AlterUserScramCredentials upsertion: a fresh salt and the salted password (never the password)."""
    from tierlog.server.auth.mechanisms import SCRAM_MECHANISMS

    salt = os.urandom(SALT_BYTES)
    salted = SCRAM_MECHANISMS[mechanism].salted_password(password.encode("utf-8"), salt, iterations)
    return {"name": user, "mechanism": mechanism_id(mechanism), "iterations": iterations, "salt": salt,
            "salted_password": salted}


def _alter(args: argparse.Namespace, deletions: list[dict[str, Any]], upsertions: list[dict[str, Any]]) -> int:
    from tierlog.cli._wire import wire_client
    from tierlog.protocol import ApiKey

    with wire_client(args) as client:
        response = client.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                               {"deletions": deletions, "upsertions": upsertions})
    for result in response.results:
        if int(result.error_code) != ErrorCode.NONE:
            name = ErrorCode(int(result.error_code)).name
            return fail(f"user {result.user}: {result.error_message or name} [{name}]")
    print(f"Completed updating config for user {args.user}.")
    return 0


@command
def run_set(args: argparse.Namespace) -> int:
    if args.add_config is not None:
        if args.password is not None or args.password_file is not None or args.mechanism:
            raise CliError("--add-config names mechanisms and passwords itself: leave out --mechanism and --password*")
        items = parse_add_config(args.add_config)
    else:
        password = _password(args)
        items = [(m, args.iterations, password) for m in dict.fromkeys(args.mechanism or ["SCRAM-SHA-512"])]
    return _alter(args, [], [upsertion(args.user, m, i, p) for m, i, p in items])


def _describe(args: argparse.Namespace, users: list[str]) -> Any:
    from tierlog.cli._wire import wire_client
    from tierlog.protocol import ApiKey

    with wire_client(args) as client:
        response = client.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                               {"users": [{"name": u} for u in users] if users else None})
    if int(response.error_code) != ErrorCode.NONE:
        name = ErrorCode(int(response.error_code)).name
        raise CliError(f"cannot describe SCRAM credentials: {response.error_message or name} [{name}]")
    return response


@command
def run_delete(args: argparse.Namespace) -> int:
    mechanisms = list(dict.fromkeys(args.mechanism))
    if not mechanisms:
        response = _describe(args, [args.user])
        result = response.results[0]
        if int(result.error_code) != ErrorCode.NONE:
            return fail(f"user {args.user}: {result.error_message or ErrorCode(int(result.error_code)).name}")
        mechanisms = [mechanism_name(int(i.mechanism)) for i in result.credential_infos]
    return _alter(args, [{"name": args.user, "mechanism": mechanism_id(m)} for m in mechanisms], [])


@command
def run_list(args: argparse.Namespace) -> int:
    response = _describe(args, list(dict.fromkeys(args.user)))
    failed = False
    for result in response.results:
        if int(result.error_code) != ErrorCode.NONE:
            print(f"error: user {result.user}: {result.error_message or ErrorCode(int(result.error_code)).name}",
                  file=sys.stderr)
            failed = True
            continue
        infos = ", ".join(f"{mechanism_name(int(i.mechanism))}=iterations={int(i.iterations)}"
                          for i in result.credential_infos)
        print(f"SCRAM credential configs for user-principal '{result.user}' are {infos}")
    return 1 if failed else 0
