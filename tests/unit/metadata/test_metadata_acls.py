"""ACLs in the metadata log: Kafka's AccessControlEntryRecord bytes, replay into the image, snapshots,
and ``tierlog metadata show``'s table."""

from __future__ import annotations

import pytest

from tierlog.ids import uuid_to_base64
from tierlog.metadata.delta import MetadataDelta, replay_records
from tierlog.metadata.errors import MetadataReplayError
from tierlog.metadata.image import EMPTY_IMAGE, image_records
from tierlog.metadata.records import (
    RECORD_TYPES,
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    decode_record,
    encode_record,
)
from tierlog.metadata.render import render_image

ID1 = bytes(range(16))
ID2 = bytes(range(1, 17))
ACL1 = AccessControlEntryRecord(ID1, 2, "t", 3, "User:a", "*", 3, 3)
ACL2 = AccessControlEntryRecord(ID2, 3, "app-", 4, "User:*", "10.0.0.1", 6, 2)


def test_api_keys_are_kafkas() -> None:
    assert RECORD_TYPES[18] is AccessControlEntryRecord
    assert RECORD_TYPES[19] is RemoveAccessControlEntryRecord


def test_access_control_entry_record_golden_bytes() -> None:
    # frame 1, apiKey 18, version 0; Id uuid; ResourceType int8; ResourceName compact string;
    # PatternType int8; Principal, Host compact strings; Operation, PermissionType int8; no tags.
    expected = (bytes([1, 18, 0]) + ID1 + b"\x02" + b"\x02t" + b"\x03" + b"\x07User:a" + b"\x02*" + b"\x03\x03"
                + b"\x00")
    assert encode_record(ACL1) == expected
    assert decode_record(expected) == ACL1


def test_remove_access_control_entry_record_golden_bytes() -> None:
    expected = bytes([1, 19, 0]) + ID1 + b"\x00"
    assert encode_record(RemoveAccessControlEntryRecord(ID1)) == expected
    assert decode_record(expected) == RemoveAccessControlEntryRecord(ID1)


def test_replay_adds_and_removes_acls() -> None:
    image = replay_records(EMPTY_IMAGE, [ACL1, ACL2])
    assert dict(image.acls) == {ID1: ACL1, ID2: ACL2}
    delta = MetadataDelta(image)
    delta.replay(RemoveAccessControlEntryRecord(ID1))
    assert delta.acls_changed
    after = delta.apply()
    assert dict(after.acls) == {ID2: ACL2}
    # An image whose ACLs did not change keeps the same mapping (the authorizer is re-indexed on change).
    untouched = replay_records(after, [])
    assert untouched.acls is after.acls


def test_replay_rejects_duplicate_and_unknown_ids() -> None:
    image = replay_records(EMPTY_IMAGE, [ACL1])
    with pytest.raises(MetadataReplayError, match="already exists"):
        replay_records(image, [ACL1])
    with pytest.raises(MetadataReplayError, match="unknown ACL id"):
        replay_records(image, [RemoveAccessControlEntryRecord(ID2)])


def test_snapshot_records_rebuild_the_acls() -> None:
    image = replay_records(EMPTY_IMAGE, [ACL1, ACL2])
    records = list(image_records(image))
    assert ACL1 in records and ACL2 in records
    assert replay_records(EMPTY_IMAGE, records) == image


def test_metadata_show_renders_acls() -> None:
    text = render_image(replay_records(EMPTY_IMAGE, [ACL1, ACL2]))
    assert "ACLs (2)" in text
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.strip().startswith(
        (uuid_to_base64(ID1), uuid_to_base64(ID2)))}
    assert lines[uuid_to_base64(ID1)][1:] == ["TOPIC", "LITERAL", "t", "User:a", "*", "READ", "ALLOW"]
    assert lines[uuid_to_base64(ID2)][1:] == ["GROUP", "PREFIXED", "app-", "User:*", "10.0.0.1", "DELETE", "DENY"]
