"""Hostile clients against the secured listeners (issue 19): fuzzed TLS and SASL handshakes.

:func:`handshake_fuzz` runs seeded attempts, many at once, against a broker with a SASL_PLAINTEXT, a
SASL_SSL (PLAIN and SCRAM-SHA-512) and an SSL listener; ``tests/reliability/test_sasl_fuzz.py`` runs
the short version and ``bench/chaos.py --only handshake`` the long one. Each attempt is one connection:

* TLS (SSL and SASL_SSL): a real ClientHello cut short or with bytes flipped, random bytes, a plaintext
  Kafka request, a connection that stops mid-handshake or never starts it;
* SASL (SASL_PLAINTEXT, and SASL_SSL inside TLS): SaslHandshake with mechanisms the listener does not
  enable, SaslAuthenticate before SaslHandshake, a second SaslHandshake, requests before authentication
  (Produce and Fetch of a topic, CreateTopics, AlterUserScramCredentials), garbled, oversized and
  truncated SCRAM and PLAIN messages, a wrong nonce, a wrong proof, a replayed client-final message of
  a good exchange, the v0 raw-token flow with garbage, frames over the pre-authentication size limit,
  and half-open exchanges left hanging.

Each attempt's outcome is the error code the broker answered with and/or that it closed the
connection; an attempt whose outcome is not one Kafka gives for it is counted as unexpected, an
answer without an error to a request that needs authentication as unauthorized, and an attempt the
broker neither answered nor closed within its bound as a hang. Between batches a good client
(SCRAM-SHA-512 over SASL_SSL) produces and fetches back a record; at the end the topic the attackers
tried to write holds only what the setup wrote.
"""

from __future__ import annotations

import base64
import os
import random
import socket
import ssl
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.reliability.fuzz_inputs import _valid_batch
from tests.reliability.harness import fetch_request
from tests.reliability.hostile_clients import LogWatch
from tests.reliability.secure_clients import (
    ATTEMPT_BOUND_S,
    PASSWORD,
    USER,
    Conn,
    GoodClient,
    ScramClient,
    authenticate,
    client_hello,
    handshake,
)
from tests.security.conftest import SecureBroker
from tests.security.pki import CertificateAuthority
from tierlog.errors import ErrorCode
from tierlog.protocol import ApiKey, build_request, encode_request

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              f'password="admin-secret" user_{USER}="{PASSWORD}";')
SECRET_TOPIC, SECRET_RECORDS = "secret", 10
#: Over Kafka's 512 KiB pre-authentication frame limit (sasl.server.max.receive.size).
OVERSIZED = 600 * 1024

CLOSED = "closed"
CLIENT_CLOSED = "client closed"  # the attempt hung up itself (a truncated message, then nothing)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


# --- the attempts --------------------------------------------------------------------------------------


@dataclass
class Target:
    ports: dict[str, int]
    tls: ssl.SSLContext
    hello: bytes
    #: A good exchange's client-first and client-final messages (replayed by ``scram-replay``).
    replay: tuple[bytes, bytes]


@dataclass
class Outcome:
    kind: str
    listener: str
    #: The error codes answered, by name, and "closed" when the broker closed the connection.
    seen: list[str]
    #: Whether the outcome is one Kafka gives for the attempt.
    expected: bool
    #: A response without an error to a request that needs authentication, or a completed login.
    unauthorized: bool = False
    seconds: float = 0.0


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if not b:
            break
        i = rng.randrange(len(b))
        b[i] = rng.randrange(256)
    if rng.random() < 0.3:
        b = b[:rng.randrange(len(b) + 1)]
    return bytes(b)


def _random_mechanism(rng: random.Random) -> str:
    return rng.choice(["GSSAPI", "OAUTHBEARER", "SCRAM-SHA-1", "scram-sha-512", "PLAIN ", "", "X" * 300,
                       "".join(chr(rng.randrange(32, 0x2FF)) for _ in range(rng.randint(1, 40)))])


def _sasl_attempts() -> dict[str, Callable[[Conn, random.Random, Target], list[str] | None]]:
    """Each SASL attempt: what it does on a connection, returning the error names it was answered
    with ("closed" last when the broker closed), or None if it hung up itself."""

    def answered(body: Any | None, then_closed: Callable[[], bool] | None = None) -> list[str]:
        if body is None:
            return [CLOSED]
        out = [_name(body.error_code)]
        if then_closed is not None and body.error_code and then_closed():
            out.append(CLOSED)
        return out

    def unknown_mechanism(c: Conn, rng: random.Random, t: Target) -> list[str]:
        return answered(handshake(c, _random_mechanism(rng), rng.choice([0, 1])), c.closed)

    def authenticate_first(c: Conn, rng: random.Random, t: Target) -> list[str]:
        return answered(authenticate(c, rng.choice([t.replay[0], os.urandom(rng.randint(0, 200))])), c.closed)

    def second_handshake(c: Conn, rng: random.Random, t: Target) -> list[str]:
        first = handshake(c, "SCRAM-SHA-512")
        assert first is not None and first.error_code == 0, first
        return answered(handshake(c, rng.choice(["SCRAM-SHA-512", "PLAIN"])), c.closed)

    def request_before_auth(c: Conn, rng: random.Random, t: Target) -> list[str]:
        if rng.random() < 0.5:  # mid-exchange rather than before the handshake
            assert (h := handshake(c, "SCRAM-SHA-512")) is not None and h.error_code == 0, h
        api, version, values = rng.choice([
            (ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 5000, "topic_data": [
                {"name": SECRET_TOPIC, "partition_data": [{"index": 0, "records": _valid_batch(rng)}]}]}),
            (ApiKey.FETCH, 11, fetch_request(SECRET_TOPIC, 0, 0, 1 << 16)),
            (ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": True}),
            (ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": f"fuzz-{uuid.uuid4().hex[:6]}", "num_partitions": 1,
                                                   "replication_factor": 1, "assignments": [], "configs": []}],
                                       "timeout": 5000, "validate_only": False}),
        ])
        body = c.call(api, version, values)
        return [CLOSED] if body is None else ["ANSWERED"]

    def scram_garbled_first(c: Conn, rng: random.Random, t: Target) -> list[str]:
        assert (h := handshake(c, "SCRAM-SHA-512")) is not None and h.error_code == 0, h
        token = rng.choice([_mutate(rng, t.replay[0]), os.urandom(rng.randint(0, 300)),
                            b"n,,n=" + b"u" * rng.randint(1000, 400_000) + b",r=x", b"y,,n=a,r=b", b"n,a=eve,n=x,r=1",
                            b"n,,n=" + bytes([0xFF, 0xFE]) + b",r=abc"])
        body = authenticate(c, token)
        if body is not None and body.error_code == 0:
            # The mutation left a well-formed client-first message: the exchange goes on with a bad proof.
            body = authenticate(c, b"c=biws,r=" + bytes(body.auth_bytes).split(b",")[0][2:] + b",p=" +
                                 base64.b64encode(os.urandom(64)))
        return answered(body, c.closed)

    def scram_bad_final(c: Conn, rng: random.Random, t: Target) -> list[str]:
        assert (h := handshake(c, "SCRAM-SHA-512")) is not None and h.error_code == 0, h
        client = ScramClient(password=rng.choice([PASSWORD, "wrong"]))
        if rng.random() < 0.2:
            client.user = rng.choice(["nobody", "admin", ""])
        first = authenticate(c, client.first)
        if first is None or first.error_code:
            return answered(first, c.closed)
        server_first = bytes(first.auth_bytes)
        how = rng.choice(["wrong nonce", "wrong proof", "garbled", "oversized"])
        if how == "wrong nonce":
            token = client.final(server_first, nonce=client.nonce + "x" * rng.randint(0, 30))
        elif how == "wrong proof":
            token = client.final(server_first, proof=os.urandom(64))
        elif how == "garbled":
            token = _mutate(rng, ScramClient(password="wrong").final(server_first, proof=os.urandom(64)))
        else:
            token = b"c=biws,r=" + b"n" * 300_000 + b",p=AAAA"
        return answered(authenticate(c, token), c.closed)

    def scram_replay(c: Conn, rng: random.Random, t: Target) -> list[str]:
        """A good exchange's messages sent again: the server's nonce differs, so the proof is refused."""
        assert (h := handshake(c, "SCRAM-SHA-512")) is not None and h.error_code == 0, h
        first = authenticate(c, t.replay[0])
        if first is None or first.error_code:
            return answered(first, c.closed)
        return answered(authenticate(c, t.replay[1]), c.closed)

    def plain_bad(c: Conn, rng: random.Random, t: Target) -> list[str]:
        assert (h := handshake(c, "PLAIN")) is not None and h.error_code == 0, h
        token = rng.choice([f"\0{USER}\0wrong".encode(), b"\0nobody\0x", f"admin\0{USER}\0{PASSWORD}x".encode(),
                            b"no-separators", b"", os.urandom(rng.randint(1, 300)), b"\0" * 5,
                            b"\0" + b"u" * 300_000 + b"\0p"])
        return answered(authenticate(c, token), c.closed)

    def raw_v0_garbage(c: Conn, rng: random.Random, t: Target) -> list[str]:
        h = handshake(c, rng.choice(["PLAIN", "SCRAM-SHA-512"]), 0)
        assert h is not None and h.error_code == 0, h
        token = os.urandom(rng.randint(0, 200))
        size = len(token) if rng.random() < 0.7 else rng.choice([OVERSIZED, 1 << 30, -1])
        c.raw(struct.pack(">i", size) + token)
        return [CLOSED] if c.closed() else ["ANSWERED"]

    def oversized_frame(c: Conn, rng: random.Random, t: Target) -> list[str]:
        c.raw(struct.pack(">i", rng.choice([OVERSIZED, 1 << 24, (1 << 31) - 1])) + os.urandom(rng.randint(0, 4096)))
        return [CLOSED] if c.closed() else ["ANSWERED"]

    def truncated(c: Conn, rng: random.Random, t: Target) -> None:
        """Half a SaslHandshake or SaslAuthenticate frame, then the client hangs up."""
        frame = encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "fuzz", build_request(ApiKey.SASL_HANDSHAKE, 1,
                                                                                    {"mechanism": "PLAIN"}))
        c.raw(frame[:rng.randrange(1, len(frame))])
        return None

    return {"unknown-mechanism": unknown_mechanism, "authenticate-before-handshake": authenticate_first,
            "second-handshake": second_handshake, "request-before-auth": request_before_auth,
            "scram-garbled-first": scram_garbled_first, "scram-bad-final": scram_bad_final,
            "scram-replay": scram_replay, "plain-bad": plain_bad, "raw-v0-garbage": raw_v0_garbage,
            "oversized-frame": oversized_frame, "truncated-frame": truncated}


#: What Kafka gives for each attempt: the error names that may be answered (then or without an answer,
#: the connection closed). "closed" alone: Kafka closes without answering.
ALLOWED: dict[str, set[str]] = {
    "unknown-mechanism": {"UNSUPPORTED_SASL_MECHANISM"},
    "authenticate-before-handshake": {"ILLEGAL_SASL_STATE"},
    "second-handshake": {"ILLEGAL_SASL_STATE"},
    "request-before-auth": set(),
    "scram-garbled-first": {"SASL_AUTHENTICATION_FAILED"},
    "scram-bad-final": {"SASL_AUTHENTICATION_FAILED"},
    "scram-replay": {"SASL_AUTHENTICATION_FAILED"},
    "plain-bad": {"SASL_AUTHENTICATION_FAILED"},
    "raw-v0-garbage": set(),
    "oversized-frame": set(),
    "tls-garbled-hello": set(),
    "tls-truncated-hello": set(),
    "tls-random-bytes": set(),
    "tls-plaintext-request": set(),
}


def _tls_attempt(kind: str, port: int, rng: random.Random, t: Target) -> list[str] | None:
    """Bytes that are not a good TLS handshake on a TLS port: the broker must close the connection."""
    if kind == "tls-garbled-hello":
        data = _mutate(rng, t.hello)
    elif kind == "tls-truncated-hello":
        data = t.hello[:rng.randrange(1, len(t.hello))]
    elif kind == "tls-random-bytes":
        data = os.urandom(rng.randint(1, 2000))
    else:  # a plaintext ApiVersions request
        data = encode_request(ApiKey.API_VERSIONS, 0, 1, "fuzz", build_request(ApiKey.API_VERSIONS, 0, {}))
    conn = Conn(port, None)
    try:
        conn.raw(data)
        if kind == "tls-truncated-hello":
            return None  # and hang up (handshake_fuzz's stalled connections are the ones that wait)
        # A hello whose lengths now promise more bytes waits for them: the handshake timeout (10 s) closes it.
        return [CLOSED] if conn.closed() else ["ANSWERED"]
    finally:
        conn.close()


SASL_ATTEMPTS = _sasl_attempts()
SASL_KINDS = list(SASL_ATTEMPTS)
TLS_KINDS = ["tls-garbled-hello", "tls-truncated-hello", "tls-random-bytes", "tls-plaintext-request"]


def run_attempt(seed: int, t: Target) -> Outcome:
    rng = random.Random(seed)
    started = time.monotonic()
    if rng.random() < 0.25:
        kind = rng.choice(TLS_KINDS)
        listener = rng.choice(["SSL", "SASL_SSL"])
        seen = _tls_attempt(kind, t.ports[listener], rng, t)
    else:
        kind = rng.choice(SASL_KINDS)
        listener = rng.choice(["SASL_PLAINTEXT", "SASL_SSL"])
        conn = Conn(t.ports[listener], t.tls if listener == "SASL_SSL" else None)
        try:
            seen = SASL_ATTEMPTS[kind](conn, rng, t)
        finally:
            conn.close()
    seconds = time.monotonic() - started
    if seen is None:
        return Outcome(kind, listener, [CLIENT_CLOSED], True, seconds=seconds)
    answered = [s for s in seen if s != CLOSED]
    # Every answer is one Kafka gives for the attempt and the connection ends closed; an error answer
    # the client reads before the close is what Kafka sends too.
    expected = seen[-1] == CLOSED and all(s in ALLOWED[kind] for s in answered)
    unauthorized = "ANSWERED" in seen or "NONE" in answered
    return Outcome(kind, listener, seen, expected, unauthorized, seconds)


# --- the run -------------------------------------------------------------------------------------------


def secured_overrides(pki_dir: Path) -> tuple[dict[str, str], CertificateAuthority, Path]:
    ca = CertificateAuthority()
    ca_file = pki_dir / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    _, _, broker_pem = ca.issue("localhost", server=True).write(pki_dir, "broker")
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker_pem),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "auto.create.topics.enable": "false",
        "connections.max.idle.ms": "5000",
    }, ca, ca_file


@dataclass
class HandshakeFuzzResult:
    attempts: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    unauthorized: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    health_checks: int = 0
    health_failures: list[str] = field(default_factory=list)
    health_max_s: float = 0.0
    stalled: int = 0
    stalled_closed: int = 0
    stalled_close_max_s: float = 0.0
    secret_end_offset: int = -1
    topics_created: list[str] = field(default_factory=list)
    crashed: bool = False
    tracebacks: list[str] = field(default_factory=list)
    refusal_log_lines: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (not self.crashed and not self.tracebacks and not self.unexpected and not self.unauthorized
                and not self.hangs and not self.errors and not self.health_failures and self.health_checks > 0
                and self.stalled_closed == self.stalled and self.stalled_close_max_s <= ATTEMPT_BOUND_S and self.secret_end_offset == SECRET_RECORDS
                and not self.topics_created)

    def summary(self) -> dict[str, Any]:
        return {
            "attempts (one connection each)": self.attempts,
            "attempts by kind": dict(sorted(self.by_kind.items())),
            "outcomes (answered error, then closed)": dict(self.outcomes.most_common()),
            "**unexpected outcomes** (must be 0)": len(self.unexpected),
            "**unauthorized answers** (must be 0)": len(self.unauthorized),
            "**hangs** (neither answered nor closed within 20 s; must be 0)": len(self.hangs),
            "attempt errors (client side)": len(self.errors),
            "good client: checks (login, produce, fetch) / failed": f"{self.health_checks} / {len(self.health_failures)}",
            "good client: slowest check": f"{self.health_max_s:.2f} s",
            "stalled connections (half a ClientHello, a handshake without SaslAuthenticate, nothing) "
            "closed by the broker": f"{self.stalled_closed} of {self.stalled}, the last after {self.stalled_close_max_s:.1f} s",
            f"records in `{SECRET_TOPIC}` at the end (setup wrote {SECRET_RECORDS})": self.secret_end_offset,
            "topics created by the attackers": len(self.topics_created),
            "'Failed authentication' log lines (rate-limited per peer)": self.refusal_log_lines,
            "broker crashed / tracebacks logged": f"{self.crashed} / {len(self.tracebacks)}",
            "duration": f"{self.seconds:.0f} s",
        }


def _stall(port: int, tls: ssl.SSLContext | None, how: str, hello: bytes) -> Conn:
    conn = Conn(port, None if how != "sasl-half-open" else tls)
    if how == "tls-half-hello":
        conn.raw(hello[:len(hello) // 2])
    elif how == "sasl-half-open":
        assert (h := handshake(conn, "SCRAM-SHA-512")) is not None and h.error_code == 0, h
    return conn


def _watch_close(conn: Conn, opened: float, closes: list[float | None], i: int) -> None:
    """Seconds until the broker closes a stalled connection (left None if it did not within the bound)."""
    conn.sock.settimeout(ATTEMPT_BOUND_S * 2)
    try:
        if conn.closed():
            closes[i] = time.monotonic() - opened
    except (TimeoutError, OSError):
        pass


def handshake_fuzz(broker: SecureBroker, tls: ssl.SSLContext, attempts: int, *, seed: int = 0,
                   concurrency: int = 16, batch: int = 500, stalled: int = 12) -> HandshakeFuzzResult:
    """``attempts`` hostile connections on the secured listeners of ``broker`` (made with
    :func:`secured_overrides`; its SCRAM user ``USER`` and topic ``secret`` set up by :func:`prepare`)."""
    result = HandshakeFuzzResult()
    started = time.monotonic()
    watch = LogWatch(broker)  # type: ignore[arg-type]
    ports = {name: broker.ports[name] for name in ("SASL_PLAINTEXT", "SASL_SSL", "SSL")}
    good = GoodClient(ports["SASL_SSL"], tls, "fuzz-health")
    _, replay = good.login()
    target = Target(ports, tls, client_hello(tls), replay)
    # Connections that stop: half a ClientHello, a SaslHandshake and then nothing, nothing at all.
    hows = ["tls-half-hello", "sasl-half-open", "tls-nothing"]
    held = [_stall(ports["SASL_SSL"] if i % 3 != 2 else ports["SSL"], tls, hows[i % 3], target.hello)
            for i in range(stalled)]
    stall_closes: list[float | None] = [None] * stalled
    watchers = [threading.Thread(target=_watch_close, args=(conn, time.monotonic(), stall_closes, i), daemon=True)
                for i, conn in enumerate(held)]
    for w in watchers:
        w.start()
    rng = random.Random(seed)
    with ThreadPoolExecutor(concurrency) as pool:
        done = 0
        while done < attempts:
            n = min(batch, attempts - done)
            seeds = [rng.randrange(1 << 62) for _ in range(n)]
            futures = [(s, pool.submit(run_attempt, s, target)) for s in seeds]
            for s, f in futures:
                try:
                    o = f.result(timeout=ATTEMPT_BOUND_S * 3)
                except TimeoutError as e:
                    result.hangs.append(f"seed {s}: {e}")
                    continue
                except Exception as e:
                    (result.hangs if isinstance(e, socket.timeout | TimeoutError) else result.errors).append(
                        f"seed {s}: {type(e).__name__}: {e}")
                    continue
                result.by_kind[o.kind] += 1
                result.outcomes[f"{o.kind}: {' then '.join(o.seen)}"] += 1
                if o.seconds > ATTEMPT_BOUND_S:
                    result.hangs.append(f"seed {s}: {o.kind} took {o.seconds:.1f} s")
                if not o.expected:
                    result.unexpected.append(f"seed {s}: {o.kind} on {o.listener}: {o.seen}")
                if o.unauthorized:
                    result.unauthorized.append(f"seed {s}: {o.kind} on {o.listener}: {o.seen}")
            done += n
            result.attempts = done
            if broker.proc is not None and broker.proc.poll() is not None:
                result.crashed = True
                break
            good.check()
    for w in watchers:
        w.join(ATTEMPT_BOUND_S * 2)
    for conn in held:
        conn.close()
    closes = [c for c in stall_closes if c is not None]
    result.stalled, result.stalled_closed = stalled, len(closes)
    result.stalled_close_max_s = max(closes, default=0.0)
    good.check()
    result.health_checks, result.health_failures = good.checks, good.failures
    result.health_max_s = max(good.latencies_s, default=0.0)
    result.crashed = result.crashed or not broker.alive()
    result.tracebacks = watch.tracebacks()
    result.refusal_log_lines = watch.new_text().count("Failed authentication")
    result.secret_end_offset, result.topics_created = _what_is_there(broker.ports["PLAINTEXT"])
    result.seconds = time.monotonic() - started
    return result


def prepare(broker: SecureBroker) -> None:
    """The SCRAM user, the good client's topic and ``secret`` with its records (on the plaintext listener)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AdminClient,
        NewTopic,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": broker.address("PLAINTEXT")})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode())]).values():
        f.result(30)
    for f in admin.create_topics([NewTopic(SECRET_TOPIC, 1), NewTopic("fuzz-health", 1)]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": broker.address("PLAINTEXT")})
    for i in range(SECRET_RECORDS):
        producer.produce(SECRET_TOPIC, f"secret-{i}".encode())
    assert producer.flush(30) == 0


def _what_is_there(plain_port: int) -> tuple[int, list[str]]:
    """The end offset of ``secret`` and any topic an attacker created."""
    from tests.helpers.raw_client import RawClient

    with RawClient(plain_port) as c:
        offsets = c.call(ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": SECRET_TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                   "timestamp": -1}]}]})
        metadata = c.call(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_cluster_authorized_operations": False,
                                               "include_topic_authorized_operations": False})
    end = int(offsets.topics[0].partitions[0].offset)
    created = [str(t.name) for t in metadata.topics if str(t.name).startswith("fuzz-") and t.name != "fuzz-health"]
    return end, created
