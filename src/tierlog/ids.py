"""Identifiers every layer shares: a partition by name (``TopicPartition``) and by topic id
(``TopicIdPartition``), and Kafka's ``Uuid`` as 16 bytes with its text form (URL-safe base64 without
padding). Below storage, so the plugin API (tiered/api.py), the metadata image and the CLI name them
without importing a file-format module."""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass

#: A partition by topic name and partition index.
TopicPartition = tuple[str, int]

#: The cluster metadata topic (KRaft's ``__cluster_metadata``, one partition): its log is the
#: controller's, written only as record batch v2 (see :func:`tierlog.storage.log.segment_settings`).
METADATA_TOPIC = "__cluster_metadata"
#: The group coordinator's and the transaction coordinator's topics: Kafka's ``Topic.INTERNAL_TOPICS``.
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"

ZERO_UUID = bytes(16)
#: Uuid.ONE_UUID, also METADATA_TOPIC_ID: reserved for the cluster metadata topic.
ONE_UUID = bytes(15) + b"\x01"
_UUID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}(==)?")


def uuid_to_base64(value: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes without padding (22 chars)."""
    if len(value) != 16:
        raise ValueError(f"a Uuid is 16 bytes, not {len(value)}")
    return base64.urlsafe_b64encode(value).rstrip(b"=").decode("ascii")


def is_uuid_text(text: str) -> bool:
    """Whether ``text`` is a Uuid in Kafka's text form (22 URL-safe base64 chars, padding optional)."""
    return _UUID_TEXT.fullmatch(text) is not None


def uuid_from_base64(text: str) -> bytes:
    """Kafka's ``Uuid.fromString``; ValueError unless ``text`` is 22 URL-safe base64 chars (padding
    optional) decoding to 16 bytes."""
    if not is_uuid_text(text):
        raise ValueError(f"{text!r} is not a base64 (URL-safe) Uuid")
    raw = base64.urlsafe_b64decode(text[:22] + "==")
    if len(raw) != 16:  # pragma: no cover - 22 base64 chars always decode to 16 bytes
        raise ValueError(f"{text!r} does not decode to 16 bytes")
    return raw


def random_uuid() -> bytes:
    """A random (version 4) Uuid, never one of the reserved ids and never one whose string starts
    with '-' (it would read as a command-line option), as Kafka's ``Uuid.randomUuid``."""
    while True:
        value = uuid.uuid4().bytes
        if value not in (ZERO_UUID, ONE_UUID) and not uuid_to_base64(value).startswith("-"):
            return value


@dataclass(frozen=True, order=True)
class TopicIdPartition:
    """A partition by topic id and name (Kafka's ``TopicIdPartition``)."""

    topic_id: bytes
    topic: str
    partition: int

    def __post_init__(self) -> None:
        if len(self.topic_id) != 16:
            raise ValueError(f"a topic id is 16 bytes, not {len(self.topic_id)}")

    def __str__(self) -> str:
        return f"{uuid_to_base64(self.topic_id)}:{self.topic}-{self.partition}"
