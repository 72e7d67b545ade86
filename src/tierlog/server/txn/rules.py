"""Kafka's transaction state rules as pure functions of the metadata and ``now_ms``
(TransactionCoordinator and TransactionMetadata): each returns the state to write, or the error code
to answer, and changes nothing itself.

Transaction version 2 (KIP-890 part 2) is a property of each transaction's end: an EndTxn v5+ (a
client that runs TV2) bumps the producer epoch when Prepare* is written, so the markers carry the
bumped epoch and fence every batch of the ended transaction that is still in flight; when the epoch
is exhausted a new producer id is allocated at Prepare* (NextProducerId) and takes over at Complete*
with epoch 0. Older EndTxn versions keep the epoch (TV0/TV1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tierlog.errors import ErrorCode as Code
from tierlog.ids import TopicPartition
from tierlog.server.txn.records import TxnLogValue, TxnState

NO_PRODUCER_EPOCH = -1
#: Kafka rotates the producer id once the epoch reaches Short.MAX_VALUE - 1 (the last one is kept for
#: fencing).
MAX_EPOCH = 32767


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = -1
    #: The epoch before the last bump (KIP-360: a retried InitProducerId may carry it); memory only,
    #: as in Kafka.
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    #: The transaction version of the client at the last transition (ClientTransactionVersion).
    client_transaction_version: int = 0
    #: TV2, epoch exhausted: the producer id that takes over when the transaction completes.
    next_producer_id: int = -1
    #: A change of this id is being written (requests meanwhile get CONCURRENT_TRANSACTIONS).
    pending: bool = False

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int) -> TxnMetadata:
        return cls(transactional_id, producer_id, NO_PRODUCER_EPOCH, timeout_ms, TxnState.EMPTY,
                   last_update_ms=now_ms)

    @classmethod
    def from_value(cls, transactional_id: str, v: TxnLogValue) -> TxnMetadata:
        parts = {(topic, p) for topic, ids in v.partitions.items() for p in ids}
        return cls(transactional_id, v.producer_id, v.producer_epoch, v.timeout_ms, v.state, parts, v.start_ms,
                   v.last_update_ms, v.previous_producer_id, NO_PRODUCER_EPOCH, v.client_transaction_version,
                   v.next_producer_id)

    def to_value(self) -> TxnLogValue:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(p)
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                           {t: tuple(ps) for t, ps in by_topic.items()}, self.last_update_ms, self.start_ms,
                           self.last_producer_id, self.next_producer_id, self.client_transaction_version)

    def copy(self) -> TxnMetadata:
        return TxnMetadata(self.transactional_id, self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                           set(self.partitions), self.start_ms, self.last_update_ms, self.last_producer_id,
                           self.last_producer_epoch, self.client_transaction_version, self.next_producer_id)

    def apply(self, target: TxnMetadata) -> None:
        self.producer_id, self.producer_epoch = target.producer_id, target.producer_epoch
        self.timeout_ms, self.state = target.timeout_ms, target.state
        self.partitions = set(target.partitions)
        self.start_ms, self.last_update_ms = target.start_ms, target.last_update_ms
        self.last_producer_id, self.last_producer_epoch = target.last_producer_id, target.last_producer_epoch
        self.client_transaction_version = target.client_transaction_version
        self.next_producer_id = target.next_producer_id


@dataclass
class InitDecision:
    target: TxnMetadata
    fence_ongoing: bool = False
    rotate_producer_id: bool = False


def valid_timeout(timeout_ms: int, max_timeout_ms: int) -> bool:
    return 0 < timeout_ms <= max_timeout_ms


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


def init_producer_id(meta: TxnMetadata, timeout_ms: int, expected_producer_id: int, expected_epoch: int,
                     now_ms: int) -> InitDecision | int:
    """InitProducerId for an existing (possibly just created) id, after the pending check."""
    expected = expected_producer_id >= 0
    if expected and not (meta.producer_epoch == NO_PRODUCER_EPOCH or expected_producer_id == meta.producer_id
                         or (expected_producer_id == meta.last_producer_id and epoch_exhausted(expected_epoch))):
        return Code.PRODUCER_FENCED
    if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE):
        return Code.CONCURRENT_TRANSACTIONS
    if meta.state is TxnState.ONGOING:
        return InitDecision(meta.copy(), fence_ongoing=True)
    if meta.state is TxnState.DEAD:
        return Code.CONCURRENT_TRANSACTIONS
    target = meta.copy()
    target.timeout_ms = timeout_ms
    target.state = TxnState.EMPTY
    target.partitions = set()
    target.start_ms = -1
    target.last_update_ms = now_ms
    target.client_transaction_version, target.next_producer_id = 0, -1
    if epoch_exhausted(meta.producer_epoch):
        target.producer_epoch, target.last_producer_epoch = 0, NO_PRODUCER_EPOCH
        return InitDecision(target, rotate_producer_id=True)
    if not expected or meta.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == meta.producer_epoch:
        target.last_producer_epoch = meta.producer_epoch
        target.producer_epoch = meta.producer_epoch + 1
        return InitDecision(target)
    if expected_epoch == meta.last_producer_epoch:
        return InitDecision(target)  # a retry of the bump whose answer the producer missed
    return Code.PRODUCER_FENCED


def add_partitions(meta: TxnMetadata, partitions: Iterable[TopicPartition], now_ms: int,
                   client_transaction_version: int = 0) -> TxnMetadata | int | None:
    """AddPartitionsToTxn after the producer checks: the state to write, an error, or None when every
    partition is already part of the ongoing transaction."""
    if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE):
        return Code.CONCURRENT_TRANSACTIONS
    if meta.state is TxnState.DEAD:
        return Code.INVALID_TXN_STATE
    wanted = set(partitions)
    if meta.state is TxnState.ONGOING and wanted <= meta.partitions:
        return None
    target = meta.copy()
    if meta.state is not TxnState.ONGOING:
        target.start_ms = now_ms
        target.partitions = set()
    target.state = TxnState.ONGOING
    target.partitions |= wanted
    target.last_update_ms = now_ms
    target.client_transaction_version = client_transaction_version
    return target


def check_end_txn_producer(meta: TxnMetadata | None, producer_id: int, producer_epoch: int) -> int | None:
    """EndTxn's producer checks (Kafka's TransactionCoordinator.endTransaction): None when the id and
    epoch may end (or retry ending) the transaction, else the code. Under TV2 the epoch in a retry is
    the one before the bump its first attempt made (or, when that bump rotated the producer id, the
    previous id at the last epoch); any other epoch is fenced."""
    if meta is None:
        return Code.INVALID_PRODUCER_ID_MAPPING
    v2 = meta.client_transaction_version >= 2
    retry_on_bump = v2 and meta.producer_epoch == producer_epoch + 1
    retry_on_overflow = (v2 and meta.last_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                         and meta.producer_epoch == 0)
    if v2 and meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        valid = retry_on_bump
    elif v2 and meta.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        valid = retry_on_bump or retry_on_overflow
    else:
        valid = producer_epoch == meta.producer_epoch
    if meta.producer_id != producer_id and not retry_on_overflow:
        return Code.INVALID_PRODUCER_ID_MAPPING
    if not valid:
        return Code.PRODUCER_FENCED
    if meta.pending:
        return Code.CONCURRENT_TRANSACTIONS
    return None


def prepare_end(meta: TxnMetadata, commit: bool, now_ms: int, client_transaction_version: int,
                next_producer_id: int = -1) -> TxnMetadata:
    """The Prepare* state ending the ongoing transaction (TransactionMetadata.prepareAbortOrCommit):
    under TV2 with the epoch bumped, and ``next_producer_id`` to take over once it is complete."""
    target = meta.copy()
    target.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    target.last_update_ms = now_ms
    target.client_transaction_version = client_transaction_version
    target.next_producer_id = -1
    if client_transaction_version >= 2 and meta.producer_epoch < MAX_EPOCH:
        target.last_producer_epoch = meta.producer_epoch
        target.producer_epoch = meta.producer_epoch + 1
        target.next_producer_id = next_producer_id
    return target


def complete_end(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Complete* after every marker is written (TransactionMetadata.prepareComplete): a TV2
    transaction that exhausted the epoch hands over to the next producer id at epoch 0."""
    target = meta.copy()
    target.state = TxnState.COMPLETE_COMMIT if meta.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    target.partitions = set()
    target.last_update_ms = now_ms
    if meta.client_transaction_version >= 2:
        target.last_producer_epoch = meta.producer_epoch
        if meta.next_producer_id >= 0:
            target.last_producer_id = meta.producer_id
            target.producer_id, target.producer_epoch = meta.next_producer_id, 0
    target.next_producer_id = -1
    return target


def end_txn(meta: TxnMetadata, commit: bool) -> int | None:
    """EndTxn after the producer checks: None to go ahead, else the code to answer (NONE for a retry
    of an end that completed)."""
    state = meta.state
    if state is TxnState.ONGOING:
        return None
    if state is TxnState.COMPLETE_COMMIT:
        return Code.NONE if commit else Code.INVALID_TXN_STATE
    if state is TxnState.COMPLETE_ABORT:
        return Code.INVALID_TXN_STATE if commit else Code.NONE
    if state is TxnState.PREPARE_COMMIT:
        return Code.CONCURRENT_TRANSACTIONS if commit else Code.INVALID_TXN_STATE
    if state is TxnState.PREPARE_ABORT:
        return Code.INVALID_TXN_STATE if commit else Code.CONCURRENT_TRANSACTIONS
    if state is TxnState.PREPARE_EPOCH_FENCE:
        return Code.CONCURRENT_TRANSACTIONS
    return Code.INVALID_TXN_STATE  # Empty or Dead: no transaction to end


def fenced(meta: TxnMetadata) -> TxnMetadata | None:
    """The ongoing transaction under a bumped epoch (None when the epoch cannot go higher: the abort
    then uses the current one, as Kafka does)."""
    if epoch_exhausted(meta.producer_epoch):
        return None
    target = meta.copy()
    target.last_producer_epoch = meta.producer_epoch
    target.producer_epoch = meta.producer_epoch + 1
    return target


def verify_partitions(meta: TxnMetadata | None, producer_id: int, producer_epoch: int,
                      partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """The coordinator's answer to a verification (AddPartitionsToTxn v4+ with verify_only; Kafka's
    TransactionCoordinator.handleVerifyPartitionsInTransaction): a partition outside the transaction
    is TRANSACTION_ABORTABLE; Prepare* answers CONCURRENT_TRANSACTIONS for all. A change being written
    is not checked (Kafka does not either: the state it replaces is still the one that holds)."""
    tps = list(partitions)
    if meta is None or meta.producer_id != producer_id:
        return dict.fromkeys(tps, Code.INVALID_PRODUCER_ID_MAPPING)
    if meta.producer_epoch != producer_epoch:
        return dict.fromkeys(tps, Code.PRODUCER_FENCED)
    if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        return dict.fromkeys(tps, Code.CONCURRENT_TRANSACTIONS)
    return {tp: Code.NONE if tp in meta.partitions else Code.TRANSACTION_ABORTABLE for tp in tps}


def verification_error(code: int, abortable_known: bool) -> int:
    """What a partition leader makes of the coordinator's verification answer (Kafka's
    AddPartitionsToTxnManager): producers expect INVALID_PRODUCER_EPOCH rather than PRODUCER_FENCED,
    and clients older than TRANSACTION_ABORTABLE (Produce before v11, TxnOffsetCommit before v4) get
    INVALID_TXN_STATE instead."""
    if code == Code.PRODUCER_FENCED:
        return Code.INVALID_PRODUCER_EPOCH
    if code == Code.TRANSACTION_ABORTABLE and not abortable_known:
        return Code.INVALID_TXN_STATE
    return code


def produce_verification_error(code: int, version: int) -> int:
    """A verification failure as a Produce ``version`` answers it (Kafka's ReplicaManager): retriable
    coordinator errors become NOT_ENOUGH_REPLICAS, which every producer retries without a metadata
    refresh."""
    code = verification_error(code, abortable_known=version >= 11)
    if code in (Code.CONCURRENT_TRANSACTIONS, Code.COORDINATOR_LOAD_IN_PROGRESS, Code.COORDINATOR_NOT_AVAILABLE,
                Code.NOT_COORDINATOR):
        return Code.NOT_ENOUGH_REPLICAS
    return code


def timed_out(meta: TxnMetadata, now_ms: int) -> bool:
    return meta.state is TxnState.ONGOING and meta.start_ms >= 0 and meta.start_ms + meta.timeout_ms < now_ms


def expired(meta: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    return (meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
            and meta.last_update_ms + expiration_ms <= now_ms)
