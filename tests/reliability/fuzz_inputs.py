"""Inputs for the fuzz scenario: valid requests of every advertised API and version, then a seeded
mutator that breaks them in the ways a broken or hostile client would.

The valid requests come from two places: hypothesis draws random messages of every API/version from
kio's schema (``st.from_type``), and hand-written "seed" requests that name a real topic, group and
producer, built at every version, reach past "unknown topic" into the handlers' deeper paths. The
mutator is a ``random.Random`` with a seed, so a run is reproducible from its seed alone.
"""

from __future__ import annotations

import dataclasses
import random
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from kio.static.primitive import Records

from tierlog.protocol import SUPPORTED_APIS, ApiKey, build_request, encode_request, request_type
from tierlog.records import SimpleRecord, build_batch

# The same strategy tests/unit/protocol/conftest.py registers: record sets are opaque bytes to the
# protocol layer. Real batches are put into the seed requests instead.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

# Requests whose random values would make the fuzzed broker do unbounded *legitimate* work (a
# CreateTopics of 2**31 partitions) are sent as validate-only and never byte-mutated: the mutator
# could flip validate_only back.
VALIDATE_ONLY_APIS = frozenset({ApiKey.CREATE_TOPICS, ApiKey.CREATE_PARTITIONS})

INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)
INTERESTING_INT16 = (0, -1, 1, 0x7FFF, -0x8000)
INTERESTING_INT32 = (0, -1, 1, 0x7FFFFFFF, -0x80000000, 0xFFFF, 0x10000)


@dataclass(frozen=True, slots=True)
class FuzzInput:
    kind: str
    #: What goes on the wire, size prefix included (or deliberately wrong).
    data: bytes
    #: The request this input was made from and the correlation id it carries, when the header is
    #: intact enough for a response to be matched (None otherwise).
    api_key: int | None = None
    api_version: int | None = None
    correlation_id: int | None = None
    #: The stream is out of step afterwards (a size prefix that lies): nothing sent later on this
    #: connection is a request, so it goes last.
    desync: bool = False


@dataclass(frozen=True)
class FuzzTarget:
    """What the seed requests name: a topic that exists (with its id), a group, a producer id."""

    topic: str
    topic_id: uuid.UUID
    partitions: int
    group: str = "fuzz-group"
    producer_id: int = -1


def _valid_batch(rng: random.Random, producer_id: int = -1) -> bytes:
    now = int(time.time() * 1000)
    records = [SimpleRecord(rng.randbytes(rng.randrange(0, 8)) or None, rng.randbytes(rng.randrange(0, 64)),
                            timestamp=now) for _ in range(rng.randrange(1, 5))]
    if producer_id >= 0:
        return build_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=rng.randrange(0, 50))
    return build_batch(records)


def seed_values(target: FuzzTarget, rng: random.Random) -> list[tuple[int, dict[str, Any]]]:
    """Requests in their newest shape (``build_request`` drops what an older version lacks)."""
    t, tid, n = target.topic, target.topic_id, target.partitions
    p = rng.randrange(n)
    fetch_partition = {"partition": p, "fetch_offset": rng.choice([0, 1, 5, -1]), "partition_max_bytes": 1 << 16,
                       "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}
    return [
        (ApiKey.METADATA, {"topics": [{"name": t, "topic_id": tid}], "allow_auto_topic_creation": False}),
        (ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False}),
        (ApiKey.PRODUCE, {"acks": rng.choice([-1, 1]), "timeout": 1000, "topic_data": [
            {"name": t, "topic_id": tid, "partition_data": [{"index": p, "records": _valid_batch(rng)}]}]}),
        (ApiKey.PRODUCE, {"acks": -1, "timeout": 1000, "topic_data": [
            {"name": t, "topic_id": tid, "partition_data": [
                {"index": p, "records": _valid_batch(rng, target.producer_id)}]}]}),
        (ApiKey.FETCH, {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": rng.choice([0, 1]),
                        "session_id": 0, "session_epoch": -1, "replica_id": -1, "rack_id": "",
                        "topics": [{"topic": t, "topic_id": tid, "partitions": [fetch_partition]}],
                        "forgotten_topics_data": []}),
        (ApiKey.LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": t, "partitions": [{"partition_index": p, "timestamp": rng.choice([-1, -2, -3, 0]),
                                        "current_leader_epoch": -1}]}]}),
        (ApiKey.OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [
            {"topic": t, "partitions": [{"partition": p, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
        (ApiKey.FIND_COORDINATOR, {"key": target.group, "key_type": 0, "coordinator_keys": [target.group]}),
        (ApiKey.OFFSET_COMMIT, {"group_id": target.group, "generation_id_or_member_epoch": -1, "member_id": "",
                                "topics": [{"name": t, "topic_id": tid, "partitions": [
                                    {"partition_index": p, "committed_offset": rng.randrange(0, 10),
                                     "committed_metadata": ""}]}]}),
        (ApiKey.OFFSET_FETCH, {"group_id": target.group, "topics": [{"name": t, "partition_indexes": [p]}],
                               "groups": [{"group_id": target.group, "topics": None}]}),
        (ApiKey.JOIN_GROUP, {"group_id": target.group, "session_timeout": 10000, "rebalance_timeout": 1000,
                             "member_id": "", "protocol_type": "consumer",
                             "protocols": [{"name": "range", "metadata": b"\x00\x01"}]}),
        (ApiKey.HEARTBEAT, {"group_id": target.group, "generation_id": 1, "member_id": "m"}),
        (ApiKey.SYNC_GROUP, {"group_id": target.group, "generation_id": 1, "member_id": "m", "assignments": []}),
        (ApiKey.LEAVE_GROUP, {"group_id": target.group, "member_id": "m", "members": [{"member_id": "m"}]}),
        (ApiKey.DESCRIBE_GROUPS, {"groups": [target.group]}),
        (ApiKey.LIST_GROUPS, {"states_filter": []}),
        (ApiKey.API_VERSIONS, {"client_software_name": "fuzz", "client_software_version": "1"}),
        (ApiKey.DESCRIBE_CONFIGS, {"resources": [{"resource_type": 2, "resource_name": t,
                                                  "configuration_keys": None}]}),
        (ApiKey.DESCRIBE_CLUSTER, {}),
        (ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                                   "producer_epoch": -1}),
        (ApiKey.DELETE_RECORDS, {"timeout": 1000, "topics": [
            {"name": t, "partitions": [{"partition_index": p, "offset": 0}]}]}),
    ]


def _versions(api_key: int) -> range:
    spec = SUPPORTED_APIS[ApiKey(api_key)]
    return range(spec.min_version, spec.max_version + 1)


def _build_seed(api_key: int, version: int, values: dict[str, Any]) -> Any | None:
    try:
        return build_request(api_key, version, values)
    except Exception:  # a field the version cannot carry (a topic id where a name is needed, ...)
        return None


def hypothesis_bodies(per_version: int, seed: int) -> list[tuple[int, int, Any]]:
    """``per_version`` random messages of every advertised API and version, drawn by hypothesis."""
    out: list[tuple[int, int, Any]] = []
    for api_key in sorted(SUPPORTED_APIS):
        for version in _versions(api_key):
            out.extend((api_key, version, _tame(api_key, body)) for body in _draw(request_type(api_key, version),
                                                                                  per_version, seed))
    return out


def _draw(body_type: type[Any], count: int, seed: int) -> list[Any]:
    drawn: list[Any] = []

    @hypothesis_seed(seed)
    @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.from_type(body_type))
    def draw(body: Any) -> None:
        drawn.append(body)

    draw()
    return drawn


def _tame(api_key: int, body: Any) -> Any:
    if api_key in VALIDATE_ONLY_APIS and hasattr(body, "validate_only"):
        return dataclasses.replace(body, validate_only=True)
    return body


class FuzzInputs:
    """An endless, reproducible stream of hostile inputs."""

    def __init__(self, target: FuzzTarget, *, seed: int = 0, per_version: int = 6,
                 max_frame_bytes: int = 100 << 20) -> None:
        self.rng = random.Random(seed)
        self.target = target
        self.max_frame_bytes = max_frame_bytes
        self.corpus = hypothesis_bodies(per_version, seed)
        self._corr = 1000
        self._makers: list[tuple[float, Callable[[], FuzzInput]]] = [
            (0.22, self.valid),
            (0.14, self.valid_seed),
            (0.38, self.mutated),
            (0.08, self.random_frame),
            (0.08, self.random_body),
            (0.05, self.truncated),
            (0.05, self.bad_prefix),
        ]
        self._weights = [w for w, _ in self._makers]
        self._hostile = [self.mutated, self.random_frame, self.random_body, self.truncated, self.bad_prefix]
        self._hostile_weights = [0.6, 0.1, 0.1, 0.1, 0.1]

    def __iter__(self) -> Iterator[FuzzInput]:
        while True:
            yield self.next()

    def next(self) -> FuzzInput:
        maker = self.rng.choices(self._makers, self._weights)[0][1]
        return maker()

    def connection_inputs(self, count: int) -> list[FuzzInput]:
        """Inputs for one connection: well-formed requests (random-valued or naming real things),
        then, mostly, a hostile one. The broker closes a connection at its first bad frame, so a
        bad input anywhere but last would waste the ones behind it."""
        last = self.hostile() if self.rng.random() < 0.85 else self.well_formed()
        return [self.well_formed() for _ in range(count - 1)] + [last]

    def well_formed(self) -> FuzzInput:
        return self.valid() if self.rng.random() < 0.6 else self.valid_seed()

    def hostile(self) -> FuzzInput:
        maker = self.rng.choices(self._hostile, self._hostile_weights)[0]
        return maker()

    # -- makers ------------------------------------------------------------------------------------

    def _next_corr(self) -> int:
        self._corr = self._corr + 1 if self._corr < 0x7FFFFFF0 else 1000
        return self._corr

    def _encode(self, api_key: int, version: int, body: Any) -> tuple[int, bytes]:
        corr = self._next_corr()
        client_id = self.rng.choice(["fuzz", "", None, "x" * self.rng.randrange(1, 300)])
        return corr, encode_request(api_key, version, corr, client_id, body)

    def valid(self) -> FuzzInput:
        api_key, version, body = self.rng.choice(self.corpus)
        corr, frame = self._encode(api_key, version, body)
        return FuzzInput("valid", frame, api_key, version, corr)

    def _seed_frame(self) -> tuple[int, int, int, bytes]:
        while True:
            api_key, values = self.rng.choice(seed_values(self.target, self.rng))
            version = self.rng.choice(_versions(api_key))
            body = _build_seed(api_key, version, values)
            if body is not None:
                corr, frame = self._encode(api_key, version, body)
                return api_key, version, corr, frame

    def valid_seed(self) -> FuzzInput:
        api_key, version, corr, frame = self._seed_frame()
        return FuzzInput("seed", frame, api_key, version, corr)

    def mutated(self) -> FuzzInput:
        if self.rng.random() < 0.5:
            api_key, version, corr, frame = self._seed_frame()
        else:
            while True:
                api_key, version, body = self.rng.choice(self.corpus)
                if api_key not in VALIDATE_ONLY_APIS:
                    break
            corr, frame = self._encode(api_key, version, body)
        payload = bytearray(frame[4:])
        for _ in range(self.rng.choice([1, 1, 1, 2, 3, 5])):
            self._mutate(payload)
        # Mostly the prefix follows the mutated length; sometimes it keeps lying about it.
        if self.rng.random() < 0.9:
            data = struct.pack(">i", len(payload)) + bytes(payload)
            desync = False
        else:
            data = frame[:4] + bytes(payload)
            desync = len(payload) != len(frame) - 4
        intact = len(payload) >= 8 and payload[:8] == frame[4:12]
        return FuzzInput("mutated", data, api_key if intact else None, version if intact else None,
                         corr if intact else None, desync)

    def _mutate(self, payload: bytearray) -> None:
        rng = self.rng
        if not payload:
            payload += rng.randbytes(rng.randrange(1, 16))
            return
        # Past the 8-byte api/version/correlation prefix three times in four, to reach the parsers.
        low = 8 if len(payload) > 9 and rng.random() < 0.75 else 0
        where = rng.randrange(low, len(payload))
        op = rng.randrange(9)
        if op == 0:
            payload[where] ^= 1 << rng.randrange(8)
        elif op == 1:
            payload[where] = rng.choice(INTERESTING_BYTES)
        elif op == 2 and where + 2 <= len(payload):
            struct.pack_into(">h", payload, where, rng.choice(INTERESTING_INT16))
        elif op == 3 and where + 4 <= len(payload):
            struct.pack_into(">i", payload, where, rng.choice(INTERESTING_INT32))
        elif op == 4:
            del payload[where:]
        elif op == 5:
            payload[where:where] = rng.randbytes(rng.randrange(1, 9))
        elif op == 6:
            end = min(len(payload), where + rng.randrange(1, 64))
            payload[where:where] = payload[where:end] * rng.randrange(1, 4)
        elif op == 7:
            del payload[where:where + rng.randrange(1, 9)]
        else:
            other = self.rng.choice(self.corpus)
            try:
                donor = encode_request(other[0], other[1], 1, "d", other[2])[4:]
            except Exception:
                return
            cut = rng.randrange(len(donor)) if donor else 0
            payload[where:] = donor[cut:]

    def random_frame(self) -> FuzzInput:
        payload = self.rng.randbytes(self.rng.randrange(0, 400))
        return FuzzInput("random", struct.pack(">i", len(payload)) + payload)

    def random_body(self) -> FuzzInput:
        api_key = self.rng.choice(sorted(SUPPORTED_APIS))
        version = self.rng.choice(_versions(api_key))
        corr = self._next_corr()
        body = self.rng.randbytes(self.rng.randrange(0, 300))
        payload = struct.pack(">hhih", api_key, version, corr, 4) + b"fuzz" + body
        return FuzzInput("random-body", struct.pack(">i", len(payload)) + payload, api_key, version, corr)

    def truncated(self) -> FuzzInput:
        _, _, _, frame = self._seed_frame()
        cut = self.rng.randrange(1, len(frame))
        return FuzzInput("truncated", frame[:cut], desync=True)

    def bad_prefix(self) -> FuzzInput:
        size = self.rng.choice([-1, -0x80000000, -4, 0x7FFFFFFF, self.max_frame_bytes + 1,
                                self.max_frame_bytes + self.rng.randrange(1, 1 << 20)])
        return FuzzInput("bad-prefix", struct.pack(">i", size) + self.rng.randbytes(self.rng.randrange(0, 32)),
                         desync=True)
