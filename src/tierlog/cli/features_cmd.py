"""``tierlog features``: describe the feature levels of a running broker and upgrade or downgrade
``metadata.version``, over the Kafka protocol (ApiVersions, UpdateFeatures) -- what
``kafka-features.sh`` does, with its output.

A metadata.version change makes the broker snapshot its metadata at once (seed 000).
"""

from __future__ import annotations

import argparse
from typing import Any

from tierlog.cli._kafka import CliError, add_wire_options, command, fail
from tierlog.errors import ErrorCode
from tierlog.metadata import (
    METADATA_VERSION_FEATURE,
    UpgradeType,
    metadata_version_name,
    parse_metadata_version,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("features", help="describe, upgrade and downgrade feature levels (metadata.version)",
                       description="Manage the finalized feature levels of a running broker over the Kafka "
                                   "protocol, like kafka-features.sh.")
    fsub = p.add_subparsers(dest="features_command", metavar="ACTION")
    fsub.required = True

    describe = fsub.add_parser("describe", help="the supported and finalized feature levels",
                               description="Each feature the broker supports: its supported range, its "
                                           "finalized level and the finalized features epoch.")
    add_wire_options(describe)
    describe.set_defaults(func=run_describe)

    version_help = ("the metadata.version: Kafka's name (3.9-IV0), a release (3.9: its latest level) "
                    "or the numeric level (21)")
    upgrade = fsub.add_parser("upgrade", help="raise metadata.version",
                              description="Raise metadata.version; the broker snapshots its metadata at once.")
    upgrade.add_argument("--metadata", required=True, metavar="VERSION", help=version_help)
    upgrade.add_argument("--dry-run", action="store_true", help="validate the upgrade, but do not perform it")
    add_wire_options(upgrade)
    upgrade.set_defaults(func=run_update, op="upgrade")

    downgrade = fsub.add_parser("downgrade", help="lower metadata.version",
                                description="Lower metadata.version. A downgrade that could lose metadata is "
                                            "refused, with --unsafe too (as in Kafka).")
    downgrade.add_argument("--metadata", required=True, metavar="VERSION", help=version_help)
    downgrade.add_argument("--unsafe", action="store_true",
                           help="ask for an unsafe (lossy) downgrade; Kafka and tierlog refuse one that "
                                "crosses a metadata format change")
    downgrade.add_argument("--dry-run", action="store_true", help="validate the downgrade, but do not perform it")
    add_wire_options(downgrade)
    downgrade.set_defaults(func=run_update, op="downgrade")


def level_to_string(feature: str, level: int) -> str:
    """FeatureCommand.levelToString: metadata.version levels by Kafka's name, others as numbers."""
    return metadata_version_name(level) if feature == METADATA_VERSION_FEATURE else str(level)


def describe_lines(api_versions: Any) -> list[str]:
    finalized = {f.name: f.max_version_level for f in api_versions.finalized_features}
    epoch = api_versions.finalized_features_epoch
    lines = []
    for f in sorted(api_versions.supported_features, key=lambda f: f.name):
        lines.append(f"Feature: {f.name}\tSupportedMinVersion: {level_to_string(f.name, f.min_version)}\t"
                     f"SupportedMaxVersion: {level_to_string(f.name, f.max_version)}\t"
                     f"FinalizedVersionLevel: {level_to_string(f.name, finalized.get(f.name, 0))}\t"
                     f"Epoch: {epoch if epoch >= 0 else '-'}")
    return lines


@command
def run_describe(args: argparse.Namespace) -> int:
    from tierlog.cli._wire import wire_client  # the protocol codec only when it is used

    with wire_client(args) as client:
        for line in describe_lines(client.api_versions):
            print(line)
    return 0


@command
def run_update(args: argparse.Namespace) -> int:
    from tierlog.cli._wire import wire_client
    from tierlog.protocol import ApiKey

    try:
        level = parse_metadata_version(args.metadata).level
    except ValueError as e:
        raise CliError(str(e)) from None
    op: str = args.op
    kind = (UpgradeType.UPGRADE if op == "upgrade"
            else UpgradeType.UNSAFE_DOWNGRADE if args.unsafe else UpgradeType.SAFE_DOWNGRADE)
    feature = METADATA_VERSION_FEATURE
    with wire_client(args) as client:
        version = client.version_for(ApiKey.UPDATE_FEATURES)
        update: dict[str, Any] = {"feature": feature, "max_version_level": level}
        if version == 0:
            update["allow_downgrade"] = kind != UpgradeType.UPGRADE
        else:
            update["upgrade_type"] = int(kind)
        response = client.call(ApiKey.UPDATE_FEATURES, {
            "timeout": int(args.timeout * 1000), "feature_updates": [update], "validate_only": args.dry_run})
    error_code, message = int(response.error_code), response.error_message
    for result in getattr(response, "results", ()):
        if result.feature == feature and int(result.error_code) != ErrorCode.NONE and error_code == ErrorCode.NONE:
            error_code, message = int(result.error_code), result.error_message
    if error_code != ErrorCode.NONE:
        helper = "Can not" if args.dry_run else "Could not"
        return fail(f"{helper} {op} {feature} to {level}. {message or f'error {error_code}'}")
    verb = "can be" if args.dry_run else "was"
    print(f"{feature} {verb} {op}d to {level}.")
    return 0
