"""Tiered storage: the remote storage plugin API, its backends (a local directory and S3), the
durable remote log metadata, and the remote log manager that copies, expires and reads remote
segments (seeds 001 and 002)."""

from tierlog.tiered.api import (
    CustomMetadataSizeLimitExceededError,
    IndexType,
    LogSegmentData,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
    load_remote_storage_manager,
)
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.remote_log_manager import RemoteFetchInfo, RemoteLogManager, RemoteLogManagerConfig
from tierlog.tiered.status import PartitionTierStatus

__all__ = [
    "CustomMetadataSizeLimitExceededError",
    "FileRemoteLogMetadataManager",
    "IndexType",
    "LogSegmentData",
    "PartitionTierStatus",
    "RemoteFetchInfo",
    "RemoteLogManager",
    "RemoteLogManagerConfig",
    "RemoteLogMetadataManager",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
    "TopicIdPartition",
    "load_remote_storage_manager",
]
