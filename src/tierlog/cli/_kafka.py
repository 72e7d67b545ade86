"""What the client commands (``topics``, ``produce``, ``consume``, ``groups``) share: the connection
options, client construction over confluent-kafka (librdkafka), and turning client failures into
one line on stderr with exit code 1.

librdkafka retries an unreachable broker forever and logs every attempt to stderr; these commands
instead check the connection first with a bounded metadata request, and route librdkafka's own log
to Python logging (shown with ``tierlog --log-level DEBUG``) so a failure is one line.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

# confluent_kafka.admin's public names, which it imports from private modules without an __all__, so
# mypy does not count them as exported; collected here once.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from tierlog.cli._errors import ERROR_EXIT, ClientConfigError, CliError
from tierlog.cli._security import add_security_options, client_security, librdkafka_properties, properties_of

__all__ = [
    "AlterConfigOpType",
    "CliError",
    "ClientConfigError",
    "ClusterMetadata",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "ConsumerGroupDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "add_connection_options",
    "admin_client",
    "check_reachable",
    "client_config",
    "command",
    "describe",
    "fail",
    "make_client",
    "offset_spec",
    "parse_pairs",
    "result",
    "results",
]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_S = 10.0

_librdkafka_log = logging.getLogger("tierlog.cli.librdkafka")


class _QuietLibrdkafkaLog:
    """librdkafka's log, every level demoted to DEBUG: it reports each failed connection attempt,
    which these commands turn into their own one-line error instead."""

    def log(self, _level: int, message: str, *args: object) -> None:
        _librdkafka_log.debug(message, *args)

T = TypeVar("T")


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                        help=f"the broker to talk to (default {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--timeout", type=_positive_float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"give up on the broker or a request after this long (default {DEFAULT_TIMEOUT_S:g})")
    add_security_options(parser)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def parse_pairs(items: list[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` items into a dict; a malformed one is a :class:`CliError` naming ``what``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{what} {item!r} is not KEY=VALUE")
        out[key.strip()] = value
    return out


def client_config(args: argparse.Namespace, **extra: str | int | float | bool) -> dict[str, Any]:
    """librdkafka properties for a client of this command: its security settings (--command-config and
    -X, Kafka's names translated) and ``extra``. Its log goes to Python logging."""
    timeout_ms = int(args.timeout * 1000)
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "tierlog-cli",
        "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
        "logger": _QuietLibrdkafkaLog(),
    }
    config.update(extra)
    config.update(librdkafka_properties(client_security(properties_of(args))))
    return config


def admin_client(args: argparse.Namespace) -> AdminClient:
    admin = make_client(AdminClient, client_config(args))
    check_reachable(admin.list_topics, args)
    return admin


def make_client(cls: Callable[[dict[str, Any]], T], config: dict[str, Any]) -> T:
    """A librdkafka client; a property librdkafka refuses is a :class:`ClientConfigError` (exit 2)."""
    try:
        return cls(config)
    except KafkaException as e:
        error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if error is not None and error.code() == KafkaError._INVALID_ARG:
            raise ClientConfigError(describe(e)) from None
        raise
    except (ValueError, TypeError) as e:
        raise ClientConfigError(str(e)) from None


def check_reachable(list_topics: Callable[..., Any], args: argparse.Namespace,
                    topic: str | None = None) -> ClusterMetadata:
    """A metadata request bounded by ``--timeout``; an unreachable broker becomes a :class:`CliError`."""
    try:
        metadata: ClusterMetadata = list_topics(topic, timeout=args.timeout)
    except KafkaException as e:
        raise CliError(f"no broker reachable at {args.bootstrap_server} within {args.timeout:g}s "
                       f"({describe(e)})") from None
    return metadata


def describe(error: BaseException | KafkaError) -> str:
    """The readable part of a client error: librdkafka's message, else the error's name."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        error = error.args[0]
    if isinstance(error, KafkaError):
        text = error.str() or error.name()
        return text if error.name() in text else f"{text} [{error.name()}]"
    return str(error) or type(error).__name__


def result(future: concurrent.futures.Future[Any], args: argparse.Namespace, what: str) -> Any:
    """Wait for an admin request's future; a broker error or a timeout is a :class:`CliError`."""
    try:
        return future.result(timeout=args.timeout)
    except concurrent.futures.TimeoutError:
        raise CliError(f"{what}: no answer from {args.bootstrap_server} within {args.timeout:g}s") from None
    except KafkaException as e:
        raise CliError(f"{what}: {describe(e)}") from None


def results(futures: Mapping[T, concurrent.futures.Future[Any]], args: argparse.Namespace,
            what: Callable[[T], str]) -> tuple[dict[T, Any], list[str]]:
    """Wait for every future of a batch request: the values that came back, and one message per failure."""
    values: dict[T, Any] = {}
    failures: list[str] = []
    for key, future in futures.items():
        try:
            values[key] = result(future, args, what(key))
        except CliError as e:
            failures.append(str(e))
    return values, failures


def offset_spec(kind: str, timestamp_ms: int = 0) -> OffsetSpec:
    """``OffsetSpec.earliest()``, ``.latest()`` or ``.for_timestamp(ms)``: its class methods are unannotated."""
    spec: OffsetSpec
    if kind == "earliest":
        spec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]  # unannotated in confluent-kafka
    elif kind == "latest":
        spec = OffsetSpec.latest()  # type: ignore[no-untyped-call]  # unannotated in confluent-kafka
    else:
        spec = OffsetSpec.for_timestamp(timestamp_ms)
    return spec


def fail(message: str, exit_code: int = ERROR_EXIT) -> int:
    print(f"error: {message}", file=sys.stderr)
    return exit_code


def command(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a client command: :class:`CliError` and client exceptions become one line and exit 1,
    Ctrl-C exits 130 quietly."""

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except CliError as e:
            return fail(str(e), e.exit_code)
        except KafkaException as e:
            return fail(describe(e))
        except KeyboardInterrupt:
            return 130

    return run


def add_wire_options(parser: argparse.ArgumentParser) -> None:
    """--bootstrap-server, --timeout and the security settings for commands that speak the protocol
    themselves (cli/_wire.py, imported only when such a command runs: it pulls in the protocol codec)."""
    parser.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                        help=f"the broker to talk to (default {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--timeout", type=_positive_float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"give up on the broker or a request after this long (default {DEFAULT_TIMEOUT_S:g})")
    add_security_options(parser)
