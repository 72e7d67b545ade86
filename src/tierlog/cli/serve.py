"""``tierlog serve``: start tierlog on embedded defaults or a ``server.properties`` file."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from tierlog.config import BrokerConfig, LogConfig
from tierlog.errors import ConfigError
from tierlog.storage.log_manager import LogManagerSettings

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


def log_manager_settings(config: BrokerConfig) -> LogManagerSettings:
    return LogManagerSettings(
        sanity_check_all_logs=config.get_bool("sanity.check.all.logs.enabled"),
        flush_check_interval_ms=config.get_int("log.flush.scheduler.interval.ms"),
        recovery_point_checkpoint_interval_ms=config.get_int("log.flush.offset.checkpoint.interval.ms"),
        log_start_offset_checkpoint_interval_ms=config.get_int("log.flush.start.offset.checkpoint.interval.ms"),
        lazy_check_interval_ms=config.get_int("log.lazy.check.interval.ms"),
        retention_check_interval_ms=config.get_int("log.retention.check.interval.ms"),
        producer_id_expiration_ms=config.get_int("producer.id.expiration.ms"),
        producer_id_expiration_check_interval_ms=config.get_int("producer.id.expiration.check.interval.ms"),
        recovery_threads_per_data_dir=config.get_int("num.recovery.threads.per.data.dir"),
        node_id=config.node_id,
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = load_broker_config(args.config, args.override)
        defaults = config.topic_defaults()
        LogConfig.from_props({}, defaults)
        # The broker checks listeners again when it binds; checking here keeps a typo a config error.
        from tierlog.server.transport import parse_listeners

        parse_listeners(config.get_list("listeners"))
        # ... and TLS certificates load (a key that does not match its certificate is a config error).
        from tierlog.server.security.listeners import ListenerSecurity

        ListenerSecurity(config)
    except ConfigError as e:
        print(f"tierlog: invalid configuration: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"tierlog: cannot read {args.config}: {e.strerror}", file=sys.stderr)
        return 2
    from tierlog.server import serve

    return asyncio.run(serve(config, log_manager_settings(config)))
