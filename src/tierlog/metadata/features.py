"""Feature levels (KIP-584, KIP-778, KIP-1022): which levels tierlog supports, Kafka's names for the
``metadata.version`` levels, and Kafka's rules for an UpdateFeatures command.

Pure functions over the finalized levels; the controller applies the records they return.

Which features tierlog reports. ``metadata.version`` 1-21 (3.0-IV1 … 3.9-IV0): the levels whose
records tierlog reads and writes. ``transaction.version`` 0-2 (KIP-890): 1 writes the transaction log's
flexible value (version 1), 2 adds the epoch bump per transaction (EndTxn v5, Produce v12 and
TxnOffsetCommit v5 adding partitions implicitly). Like Kafka's ``kafka-storage format`` on a 3.9
metadata.version (TransactionVersion's levels 1 and 2 bootstrap from 4.0-IV2), a new tierlog cluster
starts at level 0; an UpdateFeatures (``kafka-features.sh upgrade --feature transaction.version=2``)
raises it. Kafka's other features -- ``kraft.version``, ``group.version``,
``eligible.leader.replicas.version``, ``share.version``, ``streams.version`` -- describe protocols
tierlog runs at their level 0 or not at all (a static single-voter metadata log, classic groups only,
no ELR, no share groups, no streams groups), so tierlog supports each only at level 0. Kafka leaves a feature whose highest supported level is 0 out of the supported
features it advertises (``BrokerFeatures.defaultSupportedFeatures``), and so does tierlog; setting one
of them to 0 is accepted, any higher level is refused, and a feature Kafka does not know is refused at
any level -- each with Kafka's message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType

from tierlog.metadata.errors import InvalidUpdateVersionError
from tierlog.metadata.image import METADATA_VERSION_FEATURE
from tierlog.metadata.records import FeatureLevelRecord


@dataclass(frozen=True, slots=True)
class MetadataVersion:
    level: int
    #: Kafka's IBP name, e.g. ``3.9-IV0``.
    name: str
    #: Moving to this level changed the metadata format (MetadataVersion.didMetadataChange): going
    #: below it may lose metadata.
    metadata_changed: bool

    @property
    def release(self) -> str:
        return self.name.split("-", 1)[0]


#: Kafka's MetadataVersion levels tierlog supports, in order (server-common MetadataVersion.java).
METADATA_VERSIONS: tuple[MetadataVersion, ...] = tuple(MetadataVersion(level, name, changed) for level, name, changed in (
    (1, "3.0-IV1", True), (2, "3.1-IV0", False), (3, "3.2-IV0", True), (4, "3.3-IV0", False),
    (5, "3.3-IV1", True), (6, "3.3-IV2", True), (7, "3.3-IV3", True), (8, "3.4-IV0", True),
    (9, "3.5-IV0", False), (10, "3.5-IV1", False), (11, "3.5-IV2", True), (12, "3.6-IV0", False),
    (13, "3.6-IV1", True), (14, "3.6-IV2", True), (15, "3.7-IV0", True), (16, "3.7-IV1", False),
    (17, "3.7-IV2", True), (18, "3.7-IV3", False), (19, "3.7-IV4", False), (20, "3.8-IV0", False),
    (21, "3.9-IV0", False),
))
_BY_LEVEL = {mv.level: mv for mv in METADATA_VERSIONS}
MIN_METADATA_VERSION = METADATA_VERSIONS[0].level
LATEST_METADATA_VERSION = METADATA_VERSIONS[-1].level
#: The first level with a FeatureLevelRecord: Kafka refuses to set metadata.version below it
#: (MetadataVersion.MINIMUM_BOOTSTRAP_VERSION).
MINIMUM_BOOTSTRAP_METADATA_VERSION = 4

#: Kafka's features other than metadata.version; tierlog supports each only at level 0 (see above).
LEVEL_ZERO_FEATURES = ("kraft.version", "group.version", "eligible.leader.replicas.version", "share.version",
                       "streams.version")
TRANSACTION_VERSION_FEATURE = "transaction.version"
#: The highest transaction.version tierlog runs (TransactionVersion.TV_2).
LATEST_TRANSACTION_VERSION = 2

#: Feature → (min, max) supported level, for every feature tierlog knows.
SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = MappingProxyType({
    METADATA_VERSION_FEATURE: (MIN_METADATA_VERSION, LATEST_METADATA_VERSION),
    TRANSACTION_VERSION_FEATURE: (0, LATEST_TRANSACTION_VERSION),
    **{name: (0, 0) for name in LEVEL_ZERO_FEATURES},
})


def advertised_supported_features() -> dict[str, tuple[int, int]]:
    """The supported features a broker advertises: Kafka omits those whose maximum level is 0."""
    return {name: rng for name, rng in SUPPORTED_FEATURES.items() if rng[1] > 0}


def metadata_version(level: int) -> MetadataVersion | None:
    return _BY_LEVEL.get(level)


def metadata_version_name(level: int) -> str:
    """Kafka's name of a metadata.version level (FeatureCommand.levelToString)."""
    mv = _BY_LEVEL.get(level)
    return mv.name if mv is not None else f"UNKNOWN {level}"


def parse_metadata_version(text: str) -> MetadataVersion:
    """A metadata.version from Kafka's name (``3.9-IV0``), a release (``3.9``, ``3.9.1``: its latest
    level, as MetadataVersion.fromVersionString), or the numeric level (``21``). ValueError otherwise."""
    text = text.strip()
    if text.isdigit():
        mv = _BY_LEVEL.get(int(text))
        if mv is None:
            raise ValueError(f"Unknown metadata.version level {text}. Supported levels are "
                             f"{MIN_METADATA_VERSION}-{LATEST_METADATA_VERSION}.")
        return mv
    segments = text.split(".")
    key = ".".join(segments[:2]) if len(segments) > 2 else text
    for mv in reversed(METADATA_VERSIONS):
        if key in (mv.name, mv.release):
            return mv
    raise ValueError(f"Unknown metadata.version {text}. Supported metadata.version are "
                     + ", ".join(mv.name for mv in METADATA_VERSIONS))


def metadata_changed_between(a: int, b: int) -> bool:
    """Kafka's MetadataVersion.checkIfMetadataChanged: whether any level above the lower one, up to
    the higher one, changed the metadata format."""
    low, high = sorted((a, b))
    return any(_BY_LEVEL[level].metadata_changed for level in range(low + 1, high + 1))


class UpgradeType(IntEnum):
    """UpdateFeatures' UpgradeType (FeatureUpdate.UpgradeType); any other code is UNKNOWN."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3

    @classmethod
    def from_code(cls, code: int) -> UpgradeType:
        return cls(code) if code in (1, 2, 3) else cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    max_version_level: int
    upgrade_type: UpgradeType = UpgradeType.UPGRADE


def plan_feature_updates(finalized: Mapping[str, int], updates: Sequence[FeatureUpdate],
                         node_id: int) -> list[FeatureLevelRecord]:
    """The records that apply ``updates`` to the ``finalized`` levels, or InvalidUpdateVersionError
    for the first update Kafka's FeatureControlManager would refuse (then none is applied).

    A feature named twice takes its last update, as Kafka's controller does. An update to the current
    level is accepted and written, as in Kafka.
    """
    by_feature = {u.feature: u for u in updates}
    records: list[FeatureLevelRecord] = []
    for update in by_feature.values():
        records.append(_plan_one(finalized, update, node_id))
    return records


def _invalid(feature: str, level: int, reason: str) -> InvalidUpdateVersionError:
    return InvalidUpdateVersionError(f"Invalid update version {level} for feature {feature}. {reason}")


def _plan_one(finalized: Mapping[str, int], update: FeatureUpdate, node_id: int) -> FeatureLevelRecord:
    name, level, kind = update.feature, update.max_version_level, update.upgrade_type
    if kind == UpgradeType.UNKNOWN:
        raise _invalid(name, level, "The controller does not support the given upgrade type.")
    current = finalized.get(name, 0)
    if level < 0:
        raise _invalid(name, level, "A feature version cannot be less than 0.")
    low, high = SUPPORTED_FEATURES.get(name, (0, 0))
    if not low <= level <= high:
        what = f"Local controller {node_id}"
        raise _invalid(name, level, f"{what} does not support this feature." if high == 0
                       else f"{what} only supports versions {low}-{high}")
    if level < current and kind == UpgradeType.UPGRADE:
        raise _invalid(name, level, "Can't downgrade the version of this feature without setting the upgrade "
                                    "type to either safe or unsafe downgrade.")
    if level > current and kind != UpgradeType.UPGRADE:
        raise _invalid(name, level, "Can't downgrade to a newer version.")
    if name == METADATA_VERSION_FEATURE:
        _check_metadata_version(current, level, kind)
    elif name not in SUPPORTED_FEATURES:
        raise _invalid(name, level, f"Feature {name} not found.")
    return FeatureLevelRecord(name, level)


def _check_metadata_version(current: int, level: int, kind: UpgradeType) -> None:
    def invalid(reason: str) -> InvalidUpdateVersionError:
        return InvalidUpdateVersionError(f"Invalid metadata.version {level}. {reason}")

    if level < MINIMUM_BOOTSTRAP_METADATA_VERSION:
        raise invalid(f"Unable to set a metadata.version less than {metadata_version_name(MINIMUM_BOOTSTRAP_METADATA_VERSION)}")
    if level < current and metadata_changed_between(current, level):
        # Kafka 3.x and 4.x refuse an unsafe downgrade across a format change too (KAFKA-13896 was
        # never done): nothing rewrites the metadata for the older format.
        if kind == UpgradeType.UNSAFE_DOWNGRADE:
            raise invalid("Unsafe metadata downgrade is not supported in this version.")
        raise invalid("Refusing to perform the requested downgrade because it might delete metadata information.")


__all__ = [
    "LATEST_METADATA_VERSION",
    "LATEST_TRANSACTION_VERSION",
    "LEVEL_ZERO_FEATURES",
    "METADATA_VERSIONS",
    "MINIMUM_BOOTSTRAP_METADATA_VERSION",
    "MIN_METADATA_VERSION",
    "SUPPORTED_FEATURES",
    "TRANSACTION_VERSION_FEATURE",
    "FeatureUpdate",
    "MetadataVersion",
    "UpgradeType",
    "advertised_supported_features",
    "metadata_changed_between",
    "metadata_version",
    "metadata_version_name",
    "parse_metadata_version",
    "plan_feature_updates",
]
