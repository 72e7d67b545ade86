"""``meta.properties`` (KAFKA-FACTS §2.10), in ``java.util.Properties.store`` syntax (read and written by
:mod:`tierlog._util.properties`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tierlog._util.files import write_atomic
from tierlog._util.properties import PropertiesError, format_properties, read_properties
from tierlog.clock import SYSTEM_CLOCK
from tierlog.errors import TierlogError
from tierlog.ids import is_uuid_text, uuid_from_base64, uuid_to_base64
from tierlog.storage.checkpoints.base import (
    INT32_BOUNDS,
    META_PROPERTIES,
    CorruptCheckpointError,
    java_int,
)

# -- meta.properties -------------------------------------------------------------------------------------

def parse_java_properties(text: str, location: str = "properties") -> dict[str, str]:
    """:func:`tierlog._util.properties.read_properties`, a malformed escape as CorruptCheckpointError."""
    try:
        return read_properties(text, location)
    except PropertiesError as e:
        raise CorruptCheckpointError(f"{e.message} in {location}") from None


@dataclass(frozen=True)
class MetaProperties:
    """A log directory's identity. Version 1 (KRaft) requires ``cluster_id`` and ``node_id``;
    version 0 (ZooKeeper era) stores the node id as ``broker.id`` and may lack both."""

    version: int = 1
    cluster_id: str | None = None
    node_id: int | None = None
    directory_id: bytes | None = None

    def __post_init__(self) -> None:
        if self.version not in (0, 1):
            raise ValueError(f"unknown meta.properties version {self.version}")
        if self.version == 1 and (self.cluster_id is None or self.node_id is None):
            raise ValueError("meta.properties version 1 needs cluster.id and node.id")
        if self.directory_id is not None and len(self.directory_id) != 16:
            raise ValueError("directory.id must be a 16-byte Uuid")

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version)}
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        if self.node_id is not None:
            props["broker.id" if self.version == 0 else "node.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = uuid_to_base64(self.directory_id)
        return props

    @classmethod
    def from_properties(cls, props: Mapping[str, str], location: str = META_PROPERTIES) -> MetaProperties:
        def bad(message: str) -> CorruptCheckpointError:
            return CorruptCheckpointError(f"{location}: {message}")

        version_text = props.get("version", "0")
        if version_text not in ("0", "1"):
            raise bad(f"unknown meta.properties version {version_text!r}")
        version = int(version_text)
        node_key = "broker.id" if version == 0 else "node.id"
        node_id: int | None = None
        if node_key in props:
            node_id = java_int(props[node_key], INT32_BOUNDS)
            if node_id is None:
                raise bad(f"unable to read {node_key} as a base-10 number: {props[node_key]!r}")
        elif version == 1:
            raise bad("failed to find node.id")
        cluster_id = props.get("cluster.id")
        if version == 1 and cluster_id is None:
            raise bad("cluster.id was not found")
        directory_id: bytes | None = None
        if "directory.id" in props:
            try:
                directory_id = uuid_from_base64(props["directory.id"])
            except ValueError as e:
                raise bad(f"unable to read directory.id as a Uuid: {e}") from None
        return cls(version, cluster_id, node_id, directory_id)

    @classmethod
    def read(cls, path: Path) -> MetaProperties:
        """FileNotFoundError if missing; CorruptCheckpointError if invalid."""
        # Properties.load(InputStream) decodes ISO-8859-1; the values Kafka writes are ASCII anyway.
        text = Path(path).read_bytes().decode("latin-1")
        return cls.from_properties(parse_java_properties(text, str(path)), str(path))

    def write(self, path: Path, now_ms: int | None = None, sync: bool = True) -> None:
        """``now_ms`` dates the file (the broker passes its clock's); None: the system clock's now."""
        stamp_ms = SYSTEM_CLOCK.wall_ms() if now_ms is None else now_ms
        write_atomic(Path(path), format_properties(self.to_properties(), stamp_ms).encode("utf-8"), sync=sync)


def well_formed_cluster_id(cluster_id: str | None) -> bool:
    """Cluster ids are Uuids in base64 (what tierlog and ``kafka-storage format`` write): anything
    else in a meta.properties is a damaged one."""
    return cluster_id is not None and is_uuid_text(cluster_id)


def salvage_meta_properties(path: Path) -> tuple[str | None, bytes | None]:
    """The cluster id and directory id still legible in a damaged ``meta.properties`` (each None if
    its line is damaged too): a broker keeps its cluster id rather than drawing a new one each start."""
    try:
        props = parse_java_properties(Path(path).read_bytes().decode("latin-1"), str(path))
    except (OSError, TierlogError):
        return None, None
    cluster_id = props.get("cluster.id")
    if not well_formed_cluster_id(cluster_id):
        cluster_id = None
    directory_id: bytes | None = None
    try:
        directory_id = uuid_from_base64(props.get("directory.id", ""))
    except ValueError:
        pass
    return cluster_id, directory_id


def read_meta_properties(path: Path) -> MetaProperties:
    return MetaProperties.read(path)


def write_meta_properties(path: Path, meta: MetaProperties, now_ms: int | None = None, sync: bool = True) -> None:
    meta.write(path, now_ms, sync)
