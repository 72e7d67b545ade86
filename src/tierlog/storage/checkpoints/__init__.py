"""The small text files of a log directory, written exactly as Kafka writes them; one module per format.

* Offset checkpoints (``recovery-point-offset-checkpoint`` and friends) and the per-partition
  ``leader-epoch-checkpoint``: Kafka's generic ``CheckpointFile`` (KAFKA-FACTS §2.7).
* ``partition.metadata`` (§2.8) and the 16-byte Uuid's string form.
* ``meta.properties`` (§2.10), in ``java.util.Properties.store`` syntax.
* ``.kafka_cleanshutdown`` (§2.9).

Every write goes to ``<name>.tmp``, is fsynced, and is renamed over the file, so a crash leaves the
old or the new file, never a torn one. Reads are strict: a file Kafka would refuse raises
:class:`CorruptCheckpointError` naming the file and line, because silently reading a damaged
recovery point could skip recovery of data that needs it.
"""

from __future__ import annotations

from tierlog.storage.checkpoints.base import (
    CLEAN_SHUTDOWN,
    CLEAN_SHUTDOWN_VERSION,
    CLEANER_OFFSET_CHECKPOINT,
    INT32_BOUNDS,
    INT64_BOUNDS,
    LEADER_EPOCH_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT_VERSION,
    LINE_BREAK,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    OFFSET_CHECKPOINT_VERSION,
    PARTITION_METADATA,
    PARTITION_METADATA_VERSION,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointFile,
    CorruptCheckpointError,
    java_int,
    java_split_ws,
    read_lines,
)
from tierlog.storage.checkpoints.clean_shutdown import (
    CleanShutdownFile,
)
from tierlog.storage.checkpoints.epochs import (
    LeaderEpochCheckpointFile,
)
from tierlog.storage.checkpoints.meta_properties import (
    MetaProperties,
    parse_java_properties,
    read_meta_properties,
    salvage_meta_properties,
    well_formed_cluster_id,
    write_meta_properties,
)
from tierlog.storage.checkpoints.offsets import (
    OffsetCheckpointFile,
)
from tierlog.storage.checkpoints.partition_metadata import (
    DAMAGED_UUID_MAX_BITS,
    PartitionMetadataFile,
    likely_damaged_copy,
)

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "CLEAN_SHUTDOWN",
    "CLEAN_SHUTDOWN_VERSION",
    "DAMAGED_UUID_MAX_BITS",
    "INT32_BOUNDS",
    "INT64_BOUNDS",
    "LEADER_EPOCH_CHECKPOINT",
    "LEADER_EPOCH_CHECKPOINT_VERSION",
    "LINE_BREAK",
    "LOCK_FILE",
    "LOG_START_OFFSET_CHECKPOINT",
    "META_PROPERTIES",
    "OFFSET_CHECKPOINT_VERSION",
    "PARTITION_METADATA",
    "PARTITION_METADATA_VERSION",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "CheckpointFile",
    "CleanShutdownFile",
    "CorruptCheckpointError",
    "LeaderEpochCheckpointFile",
    "MetaProperties",
    "OffsetCheckpointFile",
    "PartitionMetadataFile",
    "java_int",
    "java_split_ws",
    "likely_damaged_copy",
    "parse_java_properties",
    "read_lines",
    "read_meta_properties",
    "salvage_meta_properties",
    "well_formed_cluster_id",
    "write_meta_properties",
]
