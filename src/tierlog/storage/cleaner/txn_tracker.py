"""Which transactional batches and markers the cleaner may drop (Kafka's CleanedTransactionMetadata).

Batches of an aborted transaction are dropped. An ABORT marker stays while batches of its transaction
were seen in this cleaning (its entry is then written to the cleaned transaction index), a COMMIT
marker stays while batches of its transaction were seen; otherwise the marker is discardable, and goes
once the delete horizon its batch was given has passed."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from tierlog.records.header import BatchHeader
from tierlog.storage.producer_state import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, read_end_txn_marker
from tierlog.storage.txn_index import AbortedTxn


@dataclass
class _Aborted:
    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


class TxnTracker:
    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = deque(sorted(aborted, key=lambda t: t.first_offset))
        self._ongoing_aborted: dict[int, _Aborted] = {}
        self._ongoing_committed: set[int] = set()

    def _consume_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.popleft()
            self._ongoing_aborted[txn.producer_id] = _Aborted(txn)

    def on_batch_read(self, h: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction (drop it)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        aborted = self._ongoing_aborted.get(h.producer_id)
        if aborted is not None:
            aborted.last_observed_batch_offset = h.last_offset
            return True
        self._ongoing_committed.add(h.producer_id)
        return False

    def on_control_batch_read(self, h: BatchHeader) -> tuple[bool, AbortedTxn | None]:
        """A control batch: (discardable, the aborted transaction to keep in the cleaned index)."""
        self._consume_up_to(h.last_offset)
        marker = read_end_txn_marker(h)
        if marker is None:
            return True, None  # an empty control batch left by an earlier cleaning
        if marker.control_type == CONTROL_TYPE_ABORT:
            aborted = self._ongoing_aborted.pop(h.producer_id, None)
            if aborted is not None and aborted.last_observed_batch_offset is not None:
                return False, aborted.txn
            return True, None
        if marker.control_type == CONTROL_TYPE_COMMIT:
            if h.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(h.producer_id)
                return False, None
            return True, None
        return False, None
