"""UpdateFeatures (KIP-584, KIP-778): finalized feature levels, changed by the controller under
Kafka's rules (:mod:`tierlog.metadata.features`). Their other half, the features a broker advertises,
is in the ApiVersions response (:mod:`tierlog.server.handlers.api_versions`).

Kafka 4.x answers as its QuorumController does: a refused update fails the whole request with a
top-level error and no per-feature results; a request that succeeds lists every feature with error 0
up to v1, and v2 carries no per-feature results at all.
"""

from __future__ import annotations

import logging
from typing import Any

from tierlog.errors import ErrorCode, TierlogError
from tierlog.metadata import FeatureUpdate, InvalidUpdateVersionError, MetadataImage, UpgradeType
from tierlog.metadata import advertised_supported_features as _supported
from tierlog.metadata.acls import AclOperation
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext

log = logging.getLogger(__name__)


def _update(key: Any, version: int) -> FeatureUpdate:
    if version == 0:
        # v0's AllowDowngrade is a safe downgrade (UpdateFeaturesRequest.getFeature).
        kind = UpgradeType.SAFE_DOWNGRADE if key.allow_downgrade else UpgradeType.UPGRADE
    else:
        kind = UpgradeType.from_code(key.upgrade_type)
    return FeatureUpdate(key.feature, key.max_version_level, kind)


async def handle_update_features(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    updates = [_update(key, version) for key in body.feature_updates]
    validate_only = bool(getattr(body, "validate_only", False))
    if not ctx.allowed(client, AclOperation.ALTER):
        return build_response(ApiKey.UPDATE_FEATURES, version, {
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": [],
            "error_message": ErrorCode.CLUSTER_AUTHORIZATION_FAILED.name})
    try:
        await ctx.io.run(ctx.controller.update_features, updates, validate_only=validate_only)
    except InvalidUpdateVersionError as e:
        log.warning("UpdateFeatures from %s refused: %s", client.client_id, e)
        return build_response(ApiKey.UPDATE_FEATURES, version, {
            "error_code": e.error_code, "results": [],
            "error_message": f"The update failed for all features since the following feature had an error: {e}"})
    except TierlogError as e:
        return build_response(ApiKey.UPDATE_FEATURES, version, {
            "error_code": e.error_code, "error_message": str(e), "results": []})
    if updates and not validate_only:
        log.info("features updated by %s: %s", client.client_id,
                 ", ".join(f"{u.feature}={u.max_version_level}" for u in updates))
    return build_response(ApiKey.UPDATE_FEATURES, version, {
        "error_code": ErrorCode.NONE, "error_message": None,
        "results": [{"feature": key.feature, "error_code": ErrorCode.NONE, "error_message": None} for key in body.feature_updates],
    })


def advertised_features(image: MetadataImage) -> dict[str, Any]:
    """The feature arguments of ``api_versions_response`` for this broker at ``image``."""
    return {"supported_features": _supported(), "finalized_features": image.features,
            "finalized_features_epoch": image.features_epoch}


HANDLERS = {ApiKey.UPDATE_FEATURES: handle_update_features}
