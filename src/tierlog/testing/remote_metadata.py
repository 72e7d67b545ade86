"""An in-memory RemoteLogMetadataManager for unit tests of the remote tier: the broker's store
(:class:`~tierlog.tiered.metadata_store.FileRemoteLogMetadataManager`) without the disk, with a
restart (:meth:`InMemoryRemoteLogMetadataManager.reopen`) and injected write failures.

It shares the state rules with the real store (both are a
:class:`~tierlog.tiered.metadata_store.RemoteLogMetadataStore`); what it replaces is the journal,
kept here as the list of records "made durable". tests/unit/tiered/rlmm_contract.py runs one
behaviour suite against both.
"""

from __future__ import annotations

from tierlog.errors import KafkaStorageError
from tierlog.tiered import serde
from tierlog.tiered.metadata_store import RemoteLogMetadataStore


class InMemoryRemoteLogMetadataManager(RemoteLogMetadataStore):
    """``journal`` is every record made durable, in order. Set ``fail_writes`` to make the next
    writes fail as a broken disk does (KafkaStorageError, nothing recorded); after :meth:`close`
    every write fails as the file store's does."""

    def __init__(self, journal: list[serde.RemoteLogMetadataRecord] | None = None) -> None:
        super().__init__()
        self.journal: list[serde.RemoteLogMetadataRecord] = []
        self.fail_writes = 0
        self.closed = False
        for record in journal or ():
            self.cache.apply(record)
            self.journal.append(record)

    def _persist(self, record: serde.RemoteLogMetadataRecord) -> None:
        if self.closed:
            raise KafkaStorageError("the in-memory remote log metadata store is closed")
        if self.fail_writes:
            self.fail_writes -= 1
            raise KafkaStorageError("injected write failure of the remote log metadata store")
        # Through the record encoding, as the journal does: a record that cannot be written fails here.
        self.journal.append(serde.decode(serde.encode(record)))

    def reopen(self) -> InMemoryRemoteLogMetadataManager:
        """What a restart would load: a new store replaying this one's journal."""
        with self._lock:
            return InMemoryRemoteLogMetadataManager(list(self.journal))

    def close(self) -> None:
        with self._lock:
            self.closed = True
