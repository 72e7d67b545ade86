"""The log cleaner's broker settings, dynamic as Kafka's (LogCleaner.ReconfigurableConfigs):
``log.cleaner.threads``, ``dedupe.buffer.size``, ``io.buffer.size``, ``io.buffer.load.factor``,
``io.max.bytes.per.second`` and ``backoff.ms`` set through AlterConfigs on the broker resource (this
broker's or the cluster-wide default) reconfigure the running cleaner, as Kafka's does: its threads
stop between groups and start again with the new settings. ``log.cleaner.enable`` is read at start."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tierlog.config import BrokerConfig
from tierlog.config.settings import setting_keys, with_overrides
from tierlog.errors import ConfigError
from tierlog.metadata import MetadataDelta, MetadataImage
from tierlog.server.settings import cleaner_settings
from tierlog.storage.cleaner.manager import CleanerSettings, LogCleaner

log = logging.getLogger(__name__)

#: The reconfigurable keys: every key of CleanerSettings but log.cleaner.enable (read at start).
RECONFIGURABLE_KEYS = frozenset(key for key in setting_keys(CleanerSettings).values() if key != "log.cleaner.enable")


def effective_cleaner_settings(config: BrokerConfig, image: MetadataImage | None, node_id: int) -> CleanerSettings:
    """server.properties under the dynamic values in ``image`` (per broker over cluster-wide)."""
    static = cleaner_settings(config)
    if image is None:
        return static

    def ignore(e: ConfigError) -> None:  # validated by the controller; only another version's value
        log.error("ignoring dynamic broker config %s", e)

    return with_overrides(static, lambda key: image.effective_broker_config(node_id, key), keys=RECONFIGURABLE_KEYS,
                          on_invalid=ignore)


class CleanerReconfigurer:
    """Controller listener: a commit that changes the cleaner's settings restarts its threads with
    them, on a thread of its own (a cleaning stops between groups, which the commit must not wait for)."""

    def __init__(self, cleaner: LogCleaner, config: BrokerConfig, node_id: int,
                 image: Callable[[], MetadataImage]) -> None:
        self.cleaner = cleaner
        self.config = config
        self.node_id = node_id
        self.image = image
        self._lock = threading.Lock()

    def on_commit(self, image: MetadataImage, delta: MetadataDelta) -> None:
        if effective_cleaner_settings(self.config, image, self.node_id) != self.cleaner.settings:
            threading.Thread(target=self._apply, name="log-cleaner-reconfigure", daemon=True).start()

    def _apply(self) -> None:
        with self._lock:  # one at a time, each with the settings current when it runs
            try:
                self.cleaner.reconfigure(effective_cleaner_settings(self.config, self.image(), self.node_id))
            except Exception:
                log.exception("reconfiguring the log cleaner failed")
