"""validate_and_stage_batch (the produce path's one-batch staging, with its direct check of a known
producer's next batch) answers, raises and leaves the state exactly as validate_and_stage of the same
batch does, over random runs of producers, epochs, sequences (next, retried, gapped, wrapping at
Int32.MAX), transactions and markers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.storage import build_batch
from tierlog.errors import TierlogError
from tierlog.records.header import INT32_MAX, BatchHeader
from tierlog.storage.producer_state import (
    AppendOrigin,
    ProducerStateManager,
    StagedAppend,
    StagedBatch,
    TxnCompletion,
)

CLIENT = AppendOrigin.CLIENT

steps = st.lists(
    st.tuples(
        st.sampled_from([1, 2]),  # producer id
        st.sampled_from([0, 0, 0, 1, 2]),  # epoch
        st.sampled_from(["next"] * 6 + ["retry", "older", "zero", "gap", "wrap"]),  # base sequence
        st.integers(1, 3),  # records
        st.sampled_from([None] * 8 + [0, 1]),  # a marker: ABORT or COMMIT
        st.integers(0, 5).map(lambda n: n == 0),  # transactional
        st.sampled_from([CLIENT] * 5 + [AppendOrigin.COORDINATOR, AppendOrigin.REPLICATION]),
    ),
    min_size=1,
    max_size=40,
)


def _sequence(psm: ProducerStateManager, producer_id: int, how: str) -> int:
    entry = psm.last_entry(producer_id)
    last = entry.last_seq if entry is not None else -1
    first = entry.first_seq if entry is not None else 0
    return {"next": last + 1 if last < INT32_MAX else 0, "retry": max(first, 0), "older": max(last - 1, 0),
            "zero": 0, "gap": (last + 3) % INT32_MAX, "wrap": INT32_MAX - 1}[how]


def _state(psm: ProducerStateManager) -> tuple[object, ...]:
    return (dict(psm.producers), {k: (t.producer_id, t.first_offset, t.last_offset) for k, t in psm.ongoing_txns.items()},
            psm.map_end_offset, psm.first_unstable_offset())


def _stage_and_commit(psm: ProducerStateManager, h: BatchHeader, origin: AppendOrigin,
                      fast: bool) -> tuple[object, ...]:
    try:
        staged = psm.validate_and_stage_batch(h, origin) if fast else psm.validate_and_stage([h], origin)
    except TierlogError as e:
        return ("raised", type(e), str(e))
    if staged.duplicate is not None:
        return ("duplicate", staged.duplicate)
    completions: list[TxnCompletion] = psm.commit_staged(staged, h.last_offset)
    return ("written", completions)


@settings(max_examples=400, deadline=None)
@given(steps)
def test_one_batch_staging_is_validate_and_stage(run: list[tuple[int, int, str, int, int | None, bool, AppendOrigin]]) -> None:
    fast, reference = ProducerStateManager.detached(), ProducerStateManager.detached()
    offset = 0
    for producer_id, epoch, how, count, marker, transactional, origin in run:
        kwargs: dict[str, object] = {"base_offset": offset, "producer_id": producer_id, "epoch": epoch}
        if marker is not None:
            kwargs["control"] = marker
        else:
            kwargs.update(base_seq=_sequence(reference, producer_id, how), count=count, transactional=transactional)
        h_fast = BatchHeader(build_batch(**kwargs))  # type: ignore[arg-type]
        h_reference = BatchHeader(build_batch(**kwargs))  # type: ignore[arg-type]
        outcome = _stage_and_commit(fast, h_fast, origin, True)
        assert outcome == _stage_and_commit(reference, h_reference, origin, False)
        assert _state(fast) == _state(reference)
        if outcome[0] == "written":
            offset = h_fast.last_offset + 1


def test_a_known_producers_next_batch_is_staged_directly_and_anything_else_is_not() -> None:
    psm = ProducerStateManager.detached()

    def stage(offset: int, seq: int, **kwargs: object) -> StagedAppend | StagedBatch:
        return psm.validate_and_stage_batch(
            BatchHeader(build_batch(base_offset=offset, producer_id=9, epoch=0, base_seq=seq, count=2, **kwargs)),  # type: ignore[arg-type]
            CLIENT)

    first = stage(0, 0)
    assert isinstance(first, StagedAppend)  # a producer not seen yet
    psm.commit_staged(first, 1)
    second = stage(2, 2)
    assert isinstance(second, StagedBatch)
    assert psm.commit_staged(second, 3) == []
    entry = psm.last_entry(9)
    assert entry is not None and (entry.last_seq, entry.last_data_offset, psm.map_end_offset) == (3, 3, 4)
    assert stage(2, 2).duplicate is not None  # a retry of the batch just written
    assert isinstance(stage(4, 4, transactional=True), StagedAppend)  # starts a transaction
