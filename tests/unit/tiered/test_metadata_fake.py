"""The in-memory remote log metadata store of ``tierlog.testing`` behaves as the broker's file store
(the same behaviour suite, rlmm_contract.py), and its own knobs -- a restart and injected write
failures -- do what they say."""

from __future__ import annotations

import pytest

from tierlog.errors import KafkaStorageError
from tierlog.testing import InMemoryRemoteLogMetadataManager
from tierlog.tiered.api import RemoteLogMetadataManager

from .rlmm_contract import TIP, RemoteLogMetadataManagerContract, finish, md, view


class TestInMemoryStoreContract(RemoteLogMetadataManagerContract):
    @pytest.fixture
    def store(self) -> InMemoryRemoteLogMetadataManager:
        return InMemoryRemoteLogMetadataManager()

    def restart(self, store: RemoteLogMetadataManager) -> InMemoryRemoteLogMetadataManager:
        assert isinstance(store, InMemoryRemoteLogMetadataManager)
        store.close()
        return store.reopen()


def test_a_failed_write_changes_nothing_and_the_next_one_works() -> None:
    store = InMemoryRemoteLogMetadataManager()
    finish(store, md(0, 99))
    store.fail_writes = 1
    with pytest.raises(KafkaStorageError):
        store.add_remote_log_segment_metadata(md(100, 199))
    assert [m.start_offset for m in store.list_remote_log_segments(TIP)] == [0]
    assert len(store.journal) == 2
    finish(store, md(100, 199))
    assert [m.start_offset for m in store.reopen().list_remote_log_segments(TIP)] == [0, 100]


def test_the_journal_is_what_a_restart_sees() -> None:
    store = InMemoryRemoteLogMetadataManager()
    finish(store, md(0, 99), b"cm")
    again = InMemoryRemoteLogMetadataManager(store.journal)
    assert view(again) == view(store)
