"""Checkpoint, partition.metadata, meta.properties and clean-shutdown files (KAFKA-FACTS §2.7–2.10)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tierlog._util.properties import format_properties as format_java_properties
from tierlog.errors import KafkaStorageError, TierlogError
from tierlog.ids import ONE_UUID, ZERO_UUID, random_uuid, uuid_from_base64, uuid_to_base64
from tierlog.storage.checkpoints import (
    CLEAN_SHUTDOWN,
    LEADER_EPOCH_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CleanShutdownFile,
    CorruptCheckpointError,
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    parse_java_properties,
)
from tierlog.storage.leader_epoch import EpochEntry

# -- offset checkpoints ----------------------------------------------------------------------------------


def test_offset_checkpoint_exact_text_and_round_trip(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    f.write({("foo", 0): 5, ("bar", 1): 7})
    assert f.path.read_bytes() == b"0\n2\nfoo 0 5\nbar 1 7\n"
    assert f.read() == {("foo", 0): 5, ("bar", 1): 7}
    assert not (tmp_path / f"{RECOVERY_POINT_CHECKPOINT}.tmp").exists()
    f.write({("baz", 2): 2**63 - 1})  # overwrite
    assert f.read() == {("baz", 2): 2**63 - 1}
    f.write({})
    assert f.path.read_bytes() == b"0\n0\n" and f.read() == {}


@pytest.mark.parametrize("content", [b"", b"0\n", b"0", b"0\n0\n", b"0\r\n0"])
def test_offset_checkpoint_empty_forms(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "cp"
    path.write_bytes(content)
    assert OffsetCheckpointFile(path).read() == {}


def test_missing_checkpoint_reads_empty_without_creating_it(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / "cp")
    assert f.read() == {}
    assert not f.path.exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"0\n1\nfoo\t0   5\n", {("foo", 0): 5}),  # any Java whitespace between fields
        (b"0\n1\nfoo 0 5   \n", {("foo", 0): 5}),  # trailing separators are dropped by String.split
        (b"0\r\n1\r\nfoo 0 5\r\n", {("foo", 0): 5}),  # readLine accepts \r\n
        (b"0\n2\nfoo 0 5\nfoo 0 9", {("foo", 0): 9}),  # no final newline; last duplicate wins
        (b"0\n1\nfoo 0 -1\n", {("foo", 0): -1}),
    ],
)
def test_offset_checkpoint_lenient_forms(tmp_path: Path, content: bytes, expected: dict[tuple[str, int], int]) -> None:
    path = tmp_path / "cp"
    path.write_bytes(content)
    assert OffsetCheckpointFile(path).read() == expected


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"1\n1\nfoo 0 5\n", "unrecognised version 1"),
        (b"x\n1\nfoo 0 5\n", "malformed line 1"),
        (b"0\ntwo\nfoo 0 5\n", "malformed line 2"),
        (b"0\n2\nfoo 0 5\nbar 1\n", "malformed line 4"),
        (b"0\n1\nfoo zero 5\n", "malformed line 3"),
        (b"0\n1\n foo 0 5\n", "malformed line 3"),  # a leading separator makes an empty first field
        (b"0\n1\nfoo 0 5 6\n", "malformed line 3"),
        (b"0\n1\nfoo 2147483648 5\n", "malformed line 3"),
        (b"0\n1\n\n", "malformed line 3"),
        (b"0\n3\nfoo 0 5\nbar 1 7\n", "expected 3 entries .* found 2"),
        (b"0\n1\nfoo 0 5\nbar 1 7\n", "expected 1 entries .* found 2"),
        (b"0 \n0\n", "malformed line 1"),  # Integer.parseInt does not trim
        (b"0\n1\n\xff 0 5\n", "not valid UTF-8"),
    ],
)
def test_corrupt_offset_checkpoint_names_file_and_problem(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=message) as e:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(e.value)
    assert isinstance(e.value, KafkaStorageError) and isinstance(e.value, TierlogError)


def test_topic_with_whitespace_cannot_be_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        OffsetCheckpointFile(tmp_path / "cp").write({("a b", 0): 1})


def test_write_if_dir_exists(tmp_path: Path) -> None:
    gone = OffsetCheckpointFile(tmp_path / "deleted-partition" / "cp")
    assert not gone.write_if_dir_exists({("a", 0): 1})
    here = OffsetCheckpointFile(tmp_path / "cp")
    assert here.write_if_dir_exists({("a", 0): 1}) and here.read() == {("a", 0): 1}


# -- leader-epoch checkpoint ------------------------------------------------------------------------------


def test_leader_epoch_checkpoint_exact_text(tmp_path: Path) -> None:
    f = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT)
    entries = [EpochEntry(0, 0), EpochEntry(3, 100), EpochEntry(7, 2**40)]
    f.write(entries)
    assert f.path.read_bytes() == b"0\n3\n0 0\n3 100\n7 1099511627776\n"
    assert f.read() == entries
    assert LeaderEpochCheckpointFile.encode(entries) == f.path.read_bytes()
    assert LeaderEpochCheckpointFile.decode(f.path.read_bytes()) == entries


@pytest.mark.parametrize("content", [b"0\n1\n0\n", b"0\n1\n0 1 2\n", b"0\n1\n-x 5\n", b"1\n0\n"])
def test_corrupt_leader_epoch_checkpoint(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=LEADER_EPOCH_CHECKPOINT):
        LeaderEpochCheckpointFile(path).read()


# -- Uuid and partition.metadata ---------------------------------------------------------------------------


def test_uuid_string_form() -> None:
    value = bytes(range(16))
    assert uuid_to_base64(value) == "AAECAwQFBgcICQoLDA0ODw"
    assert uuid_from_base64("AAECAwQFBgcICQoLDA0ODw") == value
    assert uuid_from_base64("AAECAwQFBgcICQoLDA0ODw==") == value, "padding is accepted"
    assert uuid_to_base64(ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert uuid_to_base64(ONE_UUID) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert uuid_to_base64(b"\xff" * 16) == "_____________________w", "URL-safe alphabet"


@pytest.mark.parametrize(
    "text", ["", "AAECAwQFBgcICQoLDA0OD", "AAECAwQFBgcICQoLDA0ODwA", "AAECAwQFBgcICQoLDA0OD+", "AAECAwQFBgcICQoLDA0OD/", "AAECAwQFBgcICQoLDA0OD w"]
)
def test_uuid_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        uuid_from_base64(text)


def test_random_uuid_avoids_reserved_values() -> None:
    seen = set()
    for _ in range(2000):
        value = random_uuid()
        assert len(value) == 16 and value not in (ZERO_UUID, ONE_UUID)
        assert not uuid_to_base64(value).startswith("-")
        assert value[6] >> 4 == 4, "a version-4 uuid, as Java's UUID.randomUUID"
        seen.add(value)
    assert len(seen) == 2000


def test_partition_metadata_exact_bytes(tmp_path: Path) -> None:
    topic_id = bytes(range(16))
    f = PartitionMetadataFile(tmp_path / "partition.metadata")
    assert not f.exists()
    f.write(topic_id)
    assert f.path.read_bytes() == b"version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw"
    assert f.exists() and f.read() == topic_id
    assert not (tmp_path / "partition.metadata.tmp").exists()
    assert f.delete() and not f.exists()


def test_partition_metadata_read_is_tolerant_of_what_kafka_tolerates(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(b"version:  0\ntopic_id:\tAAECAwQFBgcICQoLDA0ODw\n")
    assert PartitionMetadataFile(path).read() == bytes(range(16))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "zero Uuid"),
        (b"version: 1\ntopic_id: AAECAwQFBgcICQoLDA0ODw", "unrecognized version 1"),
        (b"version: -1\ntopic_id: AAECAwQFBgcICQoLDA0ODw", "unrecognized version -1"),
        (b"version:0\ntopic_id: AAECAwQFBgcICQoLDA0ODw", "malformed line 1"),
        (b"version: 0\n", "malformed line 2"),
        (b"version: 0\ntopic_id: nope", "invalid topic ID"),
        (b"", "malformed line 1"),
    ],
)
def test_partition_metadata_rejects(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=message) as e:
        PartitionMetadataFile(path).read()
    assert str(path) in str(e.value)


def test_partition_metadata_refuses_to_write_zero_uuid(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        PartitionMetadataFile(tmp_path / "partition.metadata").write(ZERO_UUID)


# -- meta.properties ----------------------------------------------------------------------------------------


def test_meta_properties_exact_text_and_round_trip(tmp_path: Path) -> None:
    directory_id = bytes(range(16))
    meta = MetaProperties(version=1, cluster_id="5L6g3nShT-eMCtK--X86sw", node_id=1, directory_id=directory_id)
    path = tmp_path / "meta.properties"
    meta.write(path, now_ms=1_707_420_552_000)
    assert path.read_text() == (
        "#\n"
        "#Thu Feb 08 19:29:12 UTC 2024\n"
        "cluster.id=5L6g3nShT-eMCtK--X86sw\n"
        "directory.id=AAECAwQFBgcICQoLDA0ODw\n"
        "node.id=1\n"
        "version=1\n"
    )
    assert MetaProperties.read(path) == meta


def test_meta_properties_reads_a_kafka_written_file(tmp_path: Path) -> None:
    # JDK 17 writes entries in hash order; the reader must not care.
    path = tmp_path / "meta.properties"
    path.write_text(
        "#\n#Thu Feb 08 19:29:12 UTC 2024\nnode.id=3\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\nversion=1\ncluster.id=abc\n"
    )
    meta = MetaProperties.read(path)
    assert (meta.version, meta.node_id, meta.cluster_id) == (1, 3, "abc")
    assert meta.directory_id == base64.urlsafe_b64decode("J8aAPcfLQt2bqs1JT_rMgQ==")


def test_meta_properties_version_0(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_text("#\nversion=0\nbroker.id=7\ncluster.id=xyz\n")
    assert MetaProperties.read(path) == MetaProperties(0, "xyz", 7, None)
    path.write_text("#\nversion=0\n")
    assert MetaProperties.read(path) == MetaProperties(0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("version=1\ncluster.id=abc\n", "node.id"),
        ("version=1\nnode.id=1\n", "cluster.id"),
        ("version=2\nnode.id=1\ncluster.id=a\n", "unknown meta.properties version"),
        ("version=1\nnode.id=one\ncluster.id=a\n", "node.id as a base-10 number"),
        ("version=1\nnode.id=1\ncluster.id=a\ndirectory.id=xx\n", "directory.id as a Uuid"),
    ],
)
def test_meta_properties_rejects(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "meta.properties"
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError, match=message) as e:
        MetaProperties.read(path)
    assert str(path) in str(e.value)


def test_java_properties_syntax() -> None:
    text = (
        "# comment\n"
        "! another comment\n"
        "   \n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "d=\\\n"
        "    continued\n"
        "e\\ key=x\\=y\\u0041\\t\n"
        "f=\n"
        "g=trailing\\\n"
    )
    assert parse_java_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "continued",
        "e key": "x=yA\t",
        "f": "",
        "g": "trailing",
    }


def test_java_properties_escaping_round_trips() -> None:
    props = {"k:ey": " lead=#!\\", "x": "a b\tc"}
    text = format_java_properties(props, now_ms=0)
    assert text.splitlines()[1] == "#Thu Jan 01 00:00:00 UTC 1970"
    assert "k\\:ey=\\ lead\\=\\#\\!\\\\" in text
    assert parse_java_properties(text) == props


# -- .kafka_cleanshutdown -------------------------------------------------------------------------------------


def test_clean_shutdown_file(tmp_path: Path) -> None:
    f = CleanShutdownFile(tmp_path)
    assert f.path == tmp_path / CLEAN_SHUTDOWN
    assert not f.exists() and f.read() is None
    f.write(42)
    assert f.path.read_bytes() == b'{"version":0,"brokerEpoch":42}'
    assert f.exists() and f.read() == 42
    assert f.delete() and not f.exists() and not f.delete()
    assert CleanShutdownFile(tmp_path / CLEAN_SHUTDOWN).path == f.path


@pytest.mark.parametrize(
    ("content", "epoch"),
    [
        (b'{"version":0,"brokerEpoch":7,"future":{"x":[1]}}', 7),
        (b'{"brokerEpoch":9}', 9),
        (b"", None),
        (b"garbage", None),
        (b"[1]", None),
        (b'{"version":0}', None),
    ],
)
def test_clean_shutdown_read_is_tolerant(tmp_path: Path, content: bytes, epoch: int | None) -> None:
    f = CleanShutdownFile(tmp_path)
    f.path.write_bytes(content)
    assert f.exists(), "existence is what matters for recovery"
    assert f.read() == epoch
