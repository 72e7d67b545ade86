"""Feature levels against a live ``tierlog serve``: the features in ApiVersions (raw requests on
tierlog's codec, and kafka-python's describe_features), UpdateFeatures' answers per version, the
``tierlog features`` commands, the metadata snapshot a metadata.version change triggers (seed 000),
and the level and epoch surviving a restart."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient

from tests.helpers.aio_client import AsyncClient
from tests.helpers.broker import BrokerProcess
from tests.helpers.cli import fails, ok

pytestmark = pytest.mark.integration

INVALID_UPDATE_VERSION = 95
DESCRIBE = re.compile(r"^Feature: metadata\.version\tSupportedMinVersion: 3\.0-IV1\tSupportedMaxVersion: 3\.9-IV0\t"
                      r"FinalizedVersionLevel: (\S+)\tEpoch: (\d+)$")


def raw(broker: BrokerProcess, api_key: int, version: int, values: dict[str, Any]) -> Any:
    async def go() -> Any:
        client = await AsyncClient.connect(broker.port, client_id="features-test")
        try:
            return await client.call(api_key, version, values)
        finally:
            client.abort()
    return asyncio.run(go())


def api_versions(broker: BrokerProcess, version: int) -> Any:
    values = {"client_software_name": "t", "client_software_version": "1"} if version >= 3 else {}
    return raw(broker, 18, version, values)


def update(broker: BrokerProcess, version: int, level: int, *, feature: str = "metadata.version",
           upgrade_type: int = 1, allow_downgrade: bool = False, validate_only: bool = False) -> Any:
    key: dict[str, Any] = {"feature": feature, "max_version_level": level}
    key.update({"allow_downgrade": allow_downgrade} if version == 0 else {"upgrade_type": upgrade_type})
    return raw(broker, 57, version, {"timeout": 5000, "feature_updates": [key], "validate_only": validate_only})


def describe(broker: BrokerProcess) -> tuple[str, int]:
    lines = ok("features", "describe", "--bootstrap-server", broker.bootstrap).splitlines()
    assert [line.split("\t")[0] for line in lines] == ["Feature: metadata.version", "Feature: transaction.version"]
    out = [line for line in lines if line.startswith("Feature: metadata.version")]
    m = DESCRIBE.match(out[0])
    assert m, out
    return m.group(1), int(m.group(2))


def snapshots(broker: BrokerProcess) -> list[str]:
    return sorted(p.name for p in (broker.data_dir / "__cluster_metadata-0").glob("*.checkpoint"))


def shown_level(data_dir: Path) -> tuple[str, str]:
    out = ok("metadata", "show", "--data-dir", str(data_dir))
    m = re.search(r"^  metadata\.version\s+(\d+)\s+(\S+)$", out, re.MULTILINE)
    assert m, out
    return m.group(1), m.group(2)


def test_api_versions_carries_the_features(broker: BrokerProcess) -> None:
    v4 = api_versions(broker, 4)
    assert sorted((f.name, f.min_version, f.max_version) for f in v4.supported_features) == [
        ("metadata.version", 1, 21), ("transaction.version", 0, 2)]
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in v4.finalized_features}
    level = finalized["metadata.version"][0]
    assert finalized == {"metadata.version": (level, level)} and 4 <= level <= 21
    assert v4.finalized_features_epoch >= 0 and v4.zk_migration_ready is False
    v3 = api_versions(broker, 3)
    # v3 leaves out supported features whose minimum is 0 (KAFKA-17492): transaction.version is 0-2.
    assert [f.name for f in v3.supported_features] == ["metadata.version"]
    assert v3.finalized_features_epoch == v4.finalized_features_epoch
    # kafka-python's DescribeFeatures reads the same answer.
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        features = admin.describe_features()
    finally:
        admin.close()
    assert features["metadata.version"]["supported"] == (1, 21)
    assert features["metadata.version"]["finalized"] == (level, level)
    assert features["metadata.version"]["finalized_epoch"] == v4.finalized_features_epoch


def test_update_features_answers_per_version(own_broker: BrokerProcess) -> None:
    b = own_broker
    epoch = api_versions(b, 4).finalized_features_epoch
    # Refused: one top-level error, no per-feature results (Kafka 4.x's controller), nothing changes.
    for version in (0, 1, 2):
        r = update(b, version, 22)
        assert r.error_code == INVALID_UPDATE_VERSION, r
        assert r.error_message.startswith("The update failed for all features since the following feature had an "
                                          "error: Invalid update version 22 for feature metadata.version. Local "
                                          "controller 1 only supports versions 1-21"), r.error_message
        assert getattr(r, "results", ()) == ()
    assert update(b, 1, 1, feature="group.version").error_code == INVALID_UPDATE_VERSION
    assert "Feature no.such not found." in update(b, 2, 0, feature="no.such").error_message
    assert "Can't downgrade the version" in update(b, 2, 20).error_message
    assert "Refusing to perform the requested downgrade" in update(b, 1, 16, upgrade_type=2).error_message
    assert "Unsafe metadata downgrade is not supported" in update(b, 1, 16, upgrade_type=3).error_message
    # validate_only: accepted, nothing written.
    checked = update(b, 1, 20, upgrade_type=2, validate_only=True)
    assert checked.error_code == 0 and [(x.feature, x.error_code) for x in checked.results] == [("metadata.version", 0)]
    assert api_versions(b, 4).finalized_features_epoch == epoch and describe(b)[0] == "3.9-IV0"
    # v0's AllowDowngrade is a safe downgrade; v0 and v1 list each feature, v2 lists none.
    assert update(b, 0, 20).error_code == INVALID_UPDATE_VERSION
    done = update(b, 0, 20, allow_downgrade=True)
    assert done.error_code == 0 and [(x.feature, x.error_code) for x in done.results] == [("metadata.version", 0)]
    v4 = api_versions(b, 4)
    assert [f.max_version_level for f in v4.finalized_features] == [20]
    assert v4.finalized_features_epoch > epoch
    up = update(b, 2, 21)
    assert up.error_code == 0 and up.error_message is None and not hasattr(up, "results")
    assert describe(b)[0] == "3.9-IV0"


def test_cli_downgrade_upgrade_snapshot_and_restart(own_broker: BrokerProcess) -> None:
    b = own_broker
    boot = ("--bootstrap-server", b.bootstrap)
    level, epoch0 = describe(b)
    assert level == "3.9-IV0"
    before = snapshots(b)

    assert ok("features", "downgrade", "--metadata", "3.8-IV0", *boot) == "metadata.version was downgraded to 20.\n"
    after_downgrade = snapshots(b)
    assert len(after_downgrade) == len(before) + 1  # the version change snapshots at once
    assert describe(b)[0] == "3.8-IV0"
    assert shown_level(b.data_dir) == ("20", "3.8-IV0")

    # Refused downgrades and dry runs change nothing.
    assert fails("features", "downgrade", "--metadata", "3.7-IV1", *boot) == (
        "error: Could not downgrade metadata.version to 16. The update failed for all features since the following "
        "feature had an error: Invalid metadata.version 16. Refusing to perform the requested downgrade because it "
        "might delete metadata information.")
    assert "Unsafe metadata downgrade is not supported" in fails("features", "downgrade", "--metadata", "16",
                                                                 "--unsafe", *boot)
    assert "Can't downgrade the version" in fails("features", "upgrade", "--metadata", "3.7", *boot)
    assert "Unknown metadata.version 4.0" in fails("features", "upgrade", "--metadata", "4.0", *boot)
    assert ok("features", "upgrade", "--metadata", "3.9", "--dry-run", *boot) == "metadata.version can be upgraded to 21.\n"
    assert describe(b)[0] == "3.8-IV0" and snapshots(b) == after_downgrade

    assert ok("features", "upgrade", "--metadata", "21", *boot) == "metadata.version was upgraded to 21.\n"
    level, epoch = describe(b)
    assert level == "3.9-IV0" and epoch > epoch0
    new = sorted(set(snapshots(b)) - set(after_downgrade))
    # The snapshot holds the change: it ends right after the feature record's offset.
    assert new == [f"{epoch + 1:020d}-0000000000.checkpoint"], (new, epoch)
    assert "reason=metadata_version_changed" in b.log_path.read_text()
    assert shown_level(b.data_dir) == ("21", "3.9-IV0")

    # Another change leaves the epoch; a restart keeps level and epoch.
    ok("topics", "create", "after-upgrade", *boot)
    assert describe(b) == ("3.9-IV0", epoch)
    b.restart()
    assert describe(b) == ("3.9-IV0", epoch)
    assert shown_level(b.data_dir) == ("21", "3.9-IV0")


def test_cli_refuses_bad_input_without_a_broker() -> None:
    assert "Unknown metadata.version 3.9-IV7" in fails("features", "upgrade", "--metadata", "3.9-IV7",
                                                       "--bootstrap-server", "127.0.0.1:1")
    assert "no broker reachable at 127.0.0.1:1" in fails("features", "describe", "--bootstrap-server", "127.0.0.1:1",
                                                         "--timeout", "2")
