"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554).

The client sends the salted password (never the password); the broker keeps only the salt, the
iteration count and the StoredKey/ServerKey derived from it, as UserScramCredentialRecords in the
metadata log. Errors per user as Kafka gives them: an unknown mechanism UNSUPPORTED_SASL_MECHANISM,
too few or too many iterations or an empty name UNACCEPTABLE_CREDENTIAL, deleting a credential that
does not exist RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tierlog.errors import ErrorCode as E
from tierlog.metadata.acls import AclOperation
from tierlog.metadata.records import (
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.auth.mechanisms import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_BY_ID
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext


async def handle_describe(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    if not ctx.allowed(client, AclOperation.DESCRIBE):
        return build_response(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request.api_version, {
            "throttle_time": 0, "error_code": E.CLUSTER_AUTHORIZATION_FAILED, "error_message": None,
            "results": []})
    creds = ctx.image.scram_credentials
    by_user: dict[str, list[dict[str, int]]] = {}
    for (name, mechanism), record in sorted(creds.items()):
        by_user.setdefault(name, []).append({"mechanism": mechanism, "iterations": record.iterations})
    users = request.body.users
    results: list[dict[str, Any]] = []
    if users is None or len(users) == 0:
        results = [{"user": u, "error_code": 0, "error_message": None, "credential_infos": infos}
                   for u, infos in by_user.items()]
    else:
        counts = Counter(str(u.name) for u in users)
        for name in dict.fromkeys(str(u.name) for u in users):
            if counts[name] > 1:
                results.append({"user": name, "error_code": E.DUPLICATE_RESOURCE, "credential_infos": [],
                                "error_message": f"Cannot describe SCRAM credentials for the same user twice "
                                                 f"in a single request: {name}"})
            elif name not in by_user:
                results.append({"user": name, "error_code": E.RESOURCE_NOT_FOUND, "credential_infos": [],
                                "error_message": f"Attempt to describe nonexistent user: {name}"})
            else:
                results.append({"user": name, "error_code": 0, "error_message": None,
                                "credential_infos": by_user[name]})
    return build_response(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request.api_version, {
        "throttle_time": 0, "error_code": 0, "error_message": None, "results": results})


def _upsert_problem(u: Any) -> tuple[int, str] | None:
    if not str(u.name):
        return E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if int(u.mechanism) not in SCRAM_BY_ID:
        return E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if int(u.iterations) < MIN_ITERATIONS:
        return E.UNACCEPTABLE_CREDENTIAL, f"Too few iterations (at least {MIN_ITERATIONS})"
    if int(u.iterations) > MAX_ITERATIONS:
        return E.UNACCEPTABLE_CREDENTIAL, f"Too many iterations (at most {MAX_ITERATIONS})"
    if not bytes(u.salt) or not bytes(u.salted_password):
        return E.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


async def handle_alter(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    image = ctx.image
    users = Counter(str(x.name) for x in [*body.deletions, *body.upsertions])
    if not ctx.allowed(client, AclOperation.ALTER):
        # Kafka checks ALTER on the cluster before anything else: every user gets the error, nothing changes.
        return build_response(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request.api_version, {"throttle_time": 0, "results": [
            {"user": name, "error_code": E.CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
            for name in users]})
    pairs = Counter((str(x.name), int(x.mechanism)) for x in [*body.deletions, *body.upsertions])
    errors: dict[str, tuple[int, str]] = {}
    records: dict[str, list[MetadataRecord]] = {}
    for d in body.deletions:
        name, mech = str(d.name), int(d.mechanism)
        if pairs[(name, mech)] > 1:
            errors.setdefault(name, (E.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same "
                                                           "request"))
        elif mech not in SCRAM_BY_ID:
            errors.setdefault(name, (E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
        elif (name, mech) not in image.scram_credentials:
            errors.setdefault(name, (E.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"))
        else:
            records.setdefault(name, []).append(RemoveUserScramCredentialRecord(name, mech))
    for u in body.upsertions:
        name = str(u.name)
        problem = (E.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request") \
            if pairs[(name, int(u.mechanism))] > 1 else _upsert_problem(u)
        if problem is not None:
            errors.setdefault(name, problem)
            continue
        scram = SCRAM_BY_ID[int(u.mechanism)]
        stored, server = scram.keys(bytes(u.salted_password))
        records.setdefault(name, []).append(
            UserScramCredentialRecord(name, scram.id, bytes(u.salt), stored, server, int(u.iterations)))
    # A user with any error changes nothing (Kafka applies each user's alterations all or none).
    planned = [r for name, rs in records.items() if name not in errors for r in rs]
    if planned:
        await ctx.io.run(ctx.controller.commit_records, planned)
    results = [{"user": name, "error_code": errors[name][0] if name in errors else 0,
                "error_message": errors[name][1] if name in errors else None} for name in users]
    return build_response(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request.api_version, {
        "throttle_time": 0, "results": results})


HANDLERS = {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe, ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter}
