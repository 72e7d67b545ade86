"""Composing the remote tier from the broker config (part of the composition root): the remote
storage plugin as the broker configures it, its metadata store and index cache in the first log
dir, and the remote log manager with threads of its own beside the broker's pool."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from tierlog.clock import SYSTEM_CLOCK, Clock
from tierlog.config.broker_config import BrokerConfig
from tierlog.config.settings import RemoteStorageSettings
from tierlog.errors import ConfigError
from tierlog.scheduler import Scheduler, ThreadScheduler
from tierlog.server.settings import remote_log_manager_settings, remote_storage_settings
from tierlog.tiered.api import (
    ZERO_TOPIC_ID,
    RemoteStorageManager,
    TopicIdPartition,
    load_remote_storage_manager,
    plugin_properties,
)
from tierlog.tiered.backends.local import DEFAULT_DIR_PROPERTY
from tierlog.tiered.compaction_jobs import requests_dir
from tierlog.tiered.layout import (
    CACHE_DIR_NAME,
    METADATA_DIR_NAME,
    STATUS_FILE_NAME,
    default_local_remote_dir,
)
from tierlog.tiered.manifest import ManifestPublisher
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.remote_compaction import CRASH_STEPS
from tierlog.tiered.remote_log_manager import LogSource, RemoteLogManager
from tierlog.tiered.restore import take_untiered_offline

log = logging.getLogger(__name__)

#: Test-only: one of remote compaction's CRASH_STEPS at which the broker SIGKILLs itself
#: (tests/integration/test_remote_compaction.py). Unset in any real deployment.
COMPACTION_CRASH_AT_ENV = "TIERLOG_TEST_REMOTE_COMPACTION_CRASH_AT"
#: Test-only: a file whose existence arms that hook. A test produces its data first and then creates
#: the file, so a compaction that runs while the test is still producing (a fast machine) does not
#: kill the broker under an unacknowledged produce.
COMPACTION_CRASH_ARMED_BY_ENV = "TIERLOG_TEST_REMOTE_COMPACTION_CRASH_ARMED_BY"


def _compaction_crash_hook() -> Callable[[str], None] | None:
    step = os.environ.get(COMPACTION_CRASH_AT_ENV)
    if not step:
        return None
    if step not in CRASH_STEPS:
        raise ConfigError(COMPACTION_CRASH_AT_ENV, f"{step} is none of {', '.join(CRASH_STEPS)}")
    log.warning("%s=%s: this broker kills itself when a remote compaction reaches that step",
                COMPACTION_CRASH_AT_ENV, step)

    armed_by = os.environ.get(COMPACTION_CRASH_ARMED_BY_ENV)

    def hook(reached: str) -> None:
        if reached == step and (armed_by is None or os.path.exists(armed_by)):
            log.warning("%s: SIGKILL at %s", COMPACTION_CRASH_AT_ENV, step)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    return hook


def remote_storage_manager(settings: RemoteStorageSettings) -> RemoteStorageManager:
    """The configured plugin, configured as the broker configures it (also for the offline
    ``tierlog tier retry-delete``). Every plugin is handed the default directory beside the first
    log dir (``tierlog.default.dir``); the embedded local-directory backend keeps its data there
    unless ``dir`` is set."""
    props = plugin_properties(settings.properties, settings.prefix, settings.broker_id)
    props.setdefault(DEFAULT_DIR_PROPERTY, str(default_local_remote_dir(settings.first_log_dir.resolve())))
    return load_remote_storage_manager(settings.class_name, props)


def remote_storage_manager_from_config(config: BrokerConfig) -> RemoteStorageManager:
    return remote_storage_manager(remote_storage_settings(config))


def create_remote_log_manager(config: BrokerConfig, logs: LogSource, *, clock: Clock = SYSTEM_CLOCK,
                              scheduler: Scheduler | None = None, own_workers: bool = False
                              ) -> RemoteLogManager | None:
    """The broker's remote log manager, or None when ``remote.log.storage.system.enable`` is false.
    State lives in the first log dir: ``remote-log-metadata/`` and ``remote-log-index-cache/``.
    With ``own_workers`` (a broker running real threads) the copy tasks and the expiration pass run
    on a pool of their own (``worker_threads`` threads); without, ``scheduler`` runs everything (a
    test's manual scheduler drives both)."""
    settings = remote_log_manager_settings(config)
    if not settings.system_enable:
        return None
    storage = remote_storage_settings(config)
    first_dir = storage.first_log_dir.resolve()
    rsm = remote_storage_manager(storage)
    metadata_dir = first_dir / METADATA_DIR_NAME
    # The journal stays the source of truth; each change is also published as the partition's
    # manifest in the remote store, so readers (Spark) need neither this disk nor the broker.
    rlmm = ManifestPublisher(FileRemoteLogMetadataManager(metadata_dir), rsm, broker_id=settings.broker_id)
    workers = ThreadScheduler(settings.worker_threads, clock, name="remote-log-manager") if own_workers else None
    return RemoteLogManager(settings, logs, rsm, rlmm, index_cache_dir=first_dir / CACHE_DIR_NAME, clock=clock,
                            scheduler=scheduler, status_path=metadata_dir / STATUS_FILE_NAME, workers=workers,
                            compaction_crash_hook=_compaction_crash_hook(),
                            compaction_requests_dir=requests_dir(metadata_dir))


def metadata_dir_of(config: BrokerConfig) -> Path:
    return remote_storage_settings(config).first_log_dir.resolve() / METADATA_DIR_NAME


def guard_without_remote_tier(metadata_dir: Path, logs: LogSource) -> dict[tuple[str, int], str]:
    """With ``remote.log.storage.system.enable=false`` no remote log manager runs, but the remote log
    metadata an earlier run left says which offsets the remote tier holds: a partition whose local log
    ends at or below them (its directory wiped) goes offline with an ERROR naming both ranges instead
    of handing those offsets out again. The metadata is read once, read-only. Returns the partitions
    taken offline, with why."""
    if not metadata_dir.is_dir():
        return {}
    rlmm = FileRemoteLogMetadataManager(metadata_dir, read_only=True)
    try:
        out = {}
        for (topic, partition), ulog in logs.all_logs().items():
            tip = TopicIdPartition(ulog.topic_id or ZERO_TOPIC_ID, topic, partition)
            reason = take_untiered_offline(rlmm, tip, ulog, "remote.log.storage.system.enable=false")
            if reason is not None:
                out[(topic, partition)] = reason
        return out
    finally:
        rlmm.close()
