"""``tierlog serve``: start tierlog on embedded defaults or a ``server.properties`` file."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from tierlog.config import BrokerConfig, LogConfig
from tierlog.errors import ConfigError

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="start the broker", description=(
        "Start tierlog. With no --config: data in ./tierlog-data, tiering enabled with the remote tier in "
        "the local directory ./tierlog-data-remote (topics opt in with remote.storage.enable=true)."))
    p.add_argument("--config", type=Path, help="a server.properties file (Kafka's syntax and key names)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set one config key (repeatable); wins over the file")
    p.set_defaults(func=run)


def load_broker_config(config_file: Path | None, overrides: list[str]) -> BrokerConfig:
    pairs: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(item, "an override must be KEY=VALUE")
        pairs[key.strip()] = value.strip()
    if config_file is not None:
        return BrokerConfig.from_file(config_file, pairs)
    # Embedded defaults: tiering is available out of the box, to a local directory beside the data
    # (topics still opt in with remote.storage.enable, as in Kafka). A config file gets Kafka's
    # default, off, unless it says otherwise.
    pairs.setdefault("remote.log.storage.system.enable", "true")
    return BrokerConfig(pairs)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_broker_config(args.config, args.override)
        defaults = config.topic_defaults()
        LogConfig.from_props({}, defaults)
        # The broker checks listeners again when it binds; checking here keeps a typo a config error.
        from tierlog.server.settings import network_settings
        from tierlog.server.transport import parse_listeners

        parse_listeners(network_settings(config).listeners)
        # ... and TLS certificates load (a key that does not match its certificate is a config error).
        from tierlog.server.security.listeners import ListenerSecurity

        ListenerSecurity(config)
    except ConfigError as e:
        print(f"tierlog: invalid configuration: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"tierlog: cannot read {args.config}: {e.strerror}", file=sys.stderr)
        return 2
    # Large request buffers come from reused heap memory, not fresh pages (see keep_freed_memory).
    from tierlog._util.libc import keep_freed_memory

    keep_freed_memory()
    # Imported once the config is valid: the server brings in the protocol codec (kio).
    from tierlog.server import serve
    from tierlog.server.settings import log_manager_settings

    return asyncio.run(serve(config, log_manager_settings(config)))
