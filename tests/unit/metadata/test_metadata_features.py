"""Feature levels: Kafka's UpdateFeatures rules (FeatureControlManager), metadata.version names, the
finalized features epoch, and the snapshot a metadata.version change triggers (seed 000)."""

from __future__ import annotations

import pytest

from tests.helpers.metadata import Env, make_settings
from tierlog.metadata.errors import InvalidUpdateVersionError
from tierlog.metadata.features import (
    LATEST_METADATA_VERSION,
    METADATA_VERSIONS,
    FeatureUpdate,
    UpgradeType,
    advertised_supported_features,
    metadata_changed_between,
    metadata_version_name,
    parse_metadata_version,
    plan_feature_updates,
)
from tierlog.metadata.policy import SnapshotReason
from tierlog.metadata.records import FeatureLevelRecord
from tierlog.metadata.snapshot import list_snapshots

MV = "metadata.version"
UP, SAFE, UNSAFE = UpgradeType.UPGRADE, UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE


def plan(current: int, level: int, kind: UpgradeType = UP, feature: str = MV) -> list[FeatureLevelRecord]:
    return plan_feature_updates({MV: current}, [FeatureUpdate(feature, level, kind)], node_id=1)


def refused(current: int, level: int, kind: UpgradeType = UP, feature: str = MV) -> str:
    with pytest.raises(InvalidUpdateVersionError) as info:
        plan(current, level, kind, feature)
    assert info.value.error_code == 95  # INVALID_UPDATE_VERSION
    return str(info.value)


def test_metadata_version_names_are_kafkas() -> None:
    assert [mv.level for mv in METADATA_VERSIONS] == list(range(1, 22))
    assert metadata_version_name(1) == "3.0-IV1" and metadata_version_name(21) == "3.9-IV0"
    assert metadata_version_name(7) == "3.3-IV3" and metadata_version_name(99) == "UNKNOWN 99"
    assert parse_metadata_version("3.9-IV0").level == 21
    assert parse_metadata_version("21").level == 21
    assert parse_metadata_version("3.3").level == 7  # a release is its latest level (fromVersionString)
    assert parse_metadata_version("3.7.1").level == 19
    assert parse_metadata_version("3.8-IV0").level == 20
    for bad in ("4.0-IV0", "3.9-IV9", "0", "22", "2.8", "latest", ""):
        with pytest.raises(ValueError):
            parse_metadata_version(bad)


def test_which_downgrades_lose_metadata() -> None:
    # didMetadataChange of the levels above the target decides (MetadataVersion.checkIfMetadataChanged).
    assert not metadata_changed_between(21, 17)  # 3.7-IV3 .. 3.9-IV0 changed nothing
    assert metadata_changed_between(21, 16)  # 3.7-IV2 did
    assert metadata_changed_between(16, 21) == metadata_changed_between(21, 16)
    assert not metadata_changed_between(8, 8)


def test_upgrade_and_the_current_level_are_accepted() -> None:
    assert plan(20, 21) == [FeatureLevelRecord(MV, 21)]
    assert plan(21, 21) == [FeatureLevelRecord(MV, 21)]  # Kafka writes the record for the same level too


def test_downgrade_needs_a_downgrade_type_and_a_downgrade_type_needs_a_downgrade() -> None:
    assert "without setting the upgrade type to either safe or unsafe downgrade" in refused(21, 20, UP)
    assert "Can't downgrade to a newer version." in refused(20, 21, SAFE)
    assert "Can't downgrade to a newer version." in refused(20, 21, UNSAFE)


def test_safe_downgrade_allowed_only_when_no_metadata_can_be_lost() -> None:
    assert plan(21, 17, SAFE) == [FeatureLevelRecord(MV, 17)]
    msg = refused(21, 16, SAFE)
    assert msg == ("Invalid metadata.version 16. Refusing to perform the requested downgrade because it might "
                   "delete metadata information.")


def test_unsafe_downgrade_is_refused_across_a_format_change_as_in_kafka() -> None:
    assert plan(21, 18, UNSAFE) == [FeatureLevelRecord(MV, 18)]  # nothing lost: allowed like a safe one
    assert refused(21, 8, UNSAFE) == "Invalid metadata.version 8. Unsafe metadata downgrade is not supported in this version."


def test_levels_outside_the_supported_range_are_refused() -> None:
    assert refused(21, 22) == ("Invalid update version 22 for feature metadata.version. "
                               "Local controller 1 only supports versions 1-21")
    assert "only supports versions 1-21" in refused(21, 0, SAFE)
    assert "A feature version cannot be less than 0." in refused(21, -1, SAFE)
    # Levels 1-3 are supported (readable) but predate FeatureLevelRecord: Kafka never sets them.
    assert refused(7, 3, UNSAFE) == "Invalid metadata.version 3. Unable to set a metadata.version less than 3.3-IV0"


def test_unknown_upgrade_type_feature_and_level_zero_features() -> None:
    assert "does not support the given upgrade type" in plan_refused_code(0)
    assert "does not support the given upgrade type" in plan_refused_code(4)
    # Kafka's other features are supported only at level 0 here: 0 is accepted, 1 refused.
    assert plan(21, 0, UP, "group.version") == [FeatureLevelRecord("group.version", 0)]
    assert refused(21, 1, UP, "group.version") == ("Invalid update version 1 for feature group.version. "
                                                   "Local controller 1 does not support this feature.")
    # transaction.version runs at 0-2 (KIP-890).
    assert plan(21, 2, UP, "transaction.version") == [FeatureLevelRecord("transaction.version", 2)]
    assert refused(21, 3, UP, "transaction.version") == ("Invalid update version 3 for feature transaction.version. "
                                                         "Local controller 1 only supports versions 0-2")
    assert "does not support this feature." in refused(21, 1, UP, "no.such.feature")
    assert refused(21, 0, UP, "no.such.feature").endswith("Feature no.such.feature not found.")
    assert advertised_supported_features() == {MV: (1, LATEST_METADATA_VERSION), "transaction.version": (0, 2)}


def plan_refused_code(code: int) -> str:
    with pytest.raises(InvalidUpdateVersionError) as info:
        plan_feature_updates({MV: 21}, [FeatureUpdate(MV, 21, UpgradeType.from_code(code))], node_id=1)
    return str(info.value)


def test_one_refused_update_refuses_the_request(env: Env) -> None:
    c = env.open(make_settings(bootstrap_version=20))
    end = c.metadata_log.log_end_offset
    with pytest.raises(InvalidUpdateVersionError):
        c.update_features([FeatureUpdate(MV, 21), FeatureUpdate("group.version", 1)])
    assert c.image.metadata_version == 20 and c.metadata_log.log_end_offset == end
    # The last update of a feature named twice wins, as in Kafka's controller.
    c.update_features([FeatureUpdate(MV, 5), FeatureUpdate(MV, 21)])
    assert c.image.metadata_version == 21


def test_validate_only_writes_nothing(env: Env) -> None:
    c = env.open(make_settings(bootstrap_version=20))
    end, epoch = c.metadata_log.log_end_offset, c.image.features_epoch
    c.update_features([FeatureUpdate(MV, 21)], validate_only=True)
    assert (c.image.metadata_version, c.metadata_log.log_end_offset, c.image.features_epoch) == (20, end, epoch)
    with pytest.raises(InvalidUpdateVersionError):
        c.update_features([FeatureUpdate(MV, 8, SAFE)], validate_only=True)  # validation still refuses
    assert list_snapshots(env.dir) == []


def test_features_epoch_is_the_offset_of_the_last_feature_change(env: Env) -> None:
    c = env.open(make_settings(bootstrap_version=19))
    assert c.image.features_epoch == 0  # the bootstrap record
    c.create_topic("orders", 3)
    assert c.image.features_epoch == 0  # other records leave it
    c.update_features([FeatureUpdate(MV, 20)])
    changed_at = c.image.provenance.last_offset
    assert changed_at > 0 and c.image.features_epoch == changed_at
    c.create_topic("later", 1)
    assert c.image.features_epoch == changed_at
    # Replayed from the log (a snapshot was taken at the change, so this reopen reads it + the tail):
    c2 = env.reopen(c)
    assert (c2.image.metadata_version, c2.image.features_epoch) == (20, changed_at)
    c2.update_features([FeatureUpdate(MV, 21)])
    c2.create_topic("last", 1)
    # From the log alone (no snapshot holds the change) the epoch is the batch's offset too.
    for snap in list_snapshots(env.dir):
        if snap.snapshot_id.end_offset > c2.image.features_epoch:
            snap.path.unlink()
    epoch = c2.image.features_epoch
    c3 = env.reopen(c2)
    assert (c3.image.metadata_version, c3.image.features_epoch) == (21, epoch)


def test_a_metadata_version_change_snapshots_at_once(env: Env) -> None:
    c = env.open(make_settings(bootstrap_version=20))
    assert list_snapshots(env.dir) == []
    c.update_features([FeatureUpdate("group.version", 0)])  # a feature record that is no version change
    assert list_snapshots(env.dir) == []
    c.update_features([FeatureUpdate(MV, 21)])
    assert [s.snapshot_id.end_offset for s in list_snapshots(env.dir)] == [c.image.provenance.end_offset]
    assert c.metrics.snapshots_generated[SnapshotReason.METADATA_VERSION_CHANGED] == 1
    c.update_features([FeatureUpdate(MV, 21)])  # the same level: written, but no change, no snapshot
    assert len(list_snapshots(env.dir)) == 1
    c.update_features([FeatureUpdate(MV, 17, SAFE)])
    assert len(list_snapshots(env.dir)) == 2
