"""File and directory naming (KAFKA-FACTS §2.1; cases after LocalLogTest#testParseTopicPartitionName*)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.storage import files


def test_offset_prefix_is_20_digits() -> None:
    assert files.filename_prefix_from_offset(0) == "00000000000000000000"
    assert files.filename_prefix_from_offset(42) == "00000000000000000042"
    assert files.filename_prefix_from_offset(2**63 - 1) == "09223372036854775807"
    with pytest.raises(ValueError):
        files.filename_prefix_from_offset(-1)


def test_segment_file_paths() -> None:
    d = Path("/data/foo-0")
    assert files.log_file(d, 5) == d / "00000000000000000005.log"
    assert files.index_file(d, 5) == d / "00000000000000000005.index"
    assert files.time_index_file(d, 5) == d / "00000000000000000005.timeindex"
    assert files.txn_index_file(d, 5) == d / "00000000000000000005.txnindex"
    assert files.producer_snapshot_file(d, 5) == d / "00000000000000000005.snapshot"
    assert files.log_file(d, 5, files.DELETED_SUFFIX) == d / "00000000000000000005.log.deleted"
    assert files.with_marker(d / "a.log", files.SWAP_SUFFIX) == d / "a.log.swap"
    assert files.without_marker(d / "a.log.swap", files.SWAP_SUFFIX) == d / "a.log"
    with pytest.raises(ValueError):
        files.without_marker(d / "a.log", files.SWAP_SUFFIX)


@pytest.mark.parametrize(
    ("name", "offset"),
    [
        ("00000000000000000042.log", 42),
        ("00000000000000000042.log.deleted", 42),
        ("00000000000000001000.snapshot", 1000),
        ("00000000000000000007.index.swap", 7),
        ("09223372036854775807.log", 2**63 - 1),
    ],
)
def test_offset_from_file_name(name: str, offset: int) -> None:
    assert files.offset_from_file_name(name) == offset


@pytest.mark.parametrize(
    "name", ["log", ".log", "abc.log", "-1.log", "+1.log", "1 .log", "09223372036854775808.log", ""]
)
def test_offset_from_garbage_file_name(name: str) -> None:
    with pytest.raises(ValueError):
        files.offset_from_file_name(name)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("foo-0", ("foo", 0)),
        ("test_topic-1", ("test_topic", 1)),
        ("my-dashed-topic-12", ("my-dashed-topic", 12)),
        ("a.b-2147483647", ("a.b", 2147483647)),
        ("foo--1", ("foo-", 1)),  # the partition follows the last dash
    ],
)
def test_parse_topic_partition_name(name: str, expected: tuple[str, int]) -> None:
    assert files.parse_topic_partition_name(name) == expected
    assert files.topic_partition_dir_name(*expected) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "foo",
        "foo-",
        "-1",
        "foo-bar",
        "foo-1a",
        "foo-2147483648",
        "foo-0.0123456789abcdef0123456789abcdef-delete",
        "foo-0.0123456789abcdef0123456789abcdef-future",
        "foo-0.0123456789abcdef0123456789abcdef-stray",
        "foo-delete",
    ],
)
def test_parse_topic_partition_name_rejects(name: str) -> None:
    with pytest.raises(ValueError):
        files.parse_topic_partition_name(name)


def test_delete_dir_name_round_trips() -> None:
    name = files.delete_dir_name("my-topic", 3)
    prefix, _, rest = name.partition(".")
    assert prefix == "my-topic-3"
    assert rest.endswith("-delete") and len(rest) == 32 + len("-delete")
    assert all(c in "0123456789abcdef" for c in rest[:32]), "uuid without dashes"
    parsed = files.parse_log_dir_name(name)
    assert (parsed.topic, parsed.partition, parsed.marker) == ("my-topic", 3, files.DELETE_DIR_SUFFIX)
    assert files.delete_dir_name("t", 0) != files.delete_dir_name("t", 0), "unique per call"
    assert files.delete_dir_name("t", 0, "abc") == "t-0.abc-delete"
    assert files.parse_log_dir_name(files.future_dir_name("t", 1)).marker == files.FUTURE_DIR_SUFFIX
    assert files.parse_log_dir_name(files.stray_dir_name("t", 1)).marker == files.STRAY_DIR_SUFFIX
    assert files.parse_log_dir_name("foo-0").marker == ""


def test_delete_dir_name_caps_length_by_shortening_topic() -> None:
    topic = "t" * 249
    name = files.delete_dir_name(topic, 123)
    assert len(name) == 255
    assert name.endswith("-delete")
    parsed = files.parse_log_dir_name(name)
    assert parsed.partition == 123 and topic.startswith(parsed.topic)


def test_malformed_marked_dir_is_rejected() -> None:
    # Ends in "-delete" but has no ".uniqueId": Kafka refuses it rather than reading topic "foo".
    with pytest.raises(ValueError):
        files.parse_log_dir_name("foo-0-delete")
