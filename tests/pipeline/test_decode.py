"""The compiled decoder and the planning helpers without Spark: windows of any size, damage, options."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from tests.helpers.pipeline import scan_options
from tests.pipeline.data import Dataset, Row
from tierlog.errors import CorruptRecordError
from tierlog.pipeline.options import TierlogOptionError, parse_options, split_ranges
from tierlog.pipeline.packing import pack_ranges
from tierlog.pipeline.reader import ARROW_SCHEMA_WITH_HEADERS, ScanRange, read_range
from tierlog.pipeline.source import _rate_limit


def scan(ds: Dataset, topic: str, *, window_bytes: int = 16 << 20, **options: str) -> list[Row]:
    return scan_options({"path": str(ds.data), "subscribe": topic, **options}, window_bytes=window_bytes)


def test_arrow_schema_is_what_spark_expects() -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import to_arrow_schema

    from tierlog.pipeline.source import kafka_schema

    assert to_arrow_schema(kafka_schema(True), timezone="UTC") == ARROW_SCHEMA_WITH_HEADERS


@pytest.mark.parametrize("window", [61, 300, 1000, 16 << 20])
def test_any_window_size_reads_the_same_rows(dataset: Dataset, window: int) -> None:
    # Windows smaller than one batch exercise the carry-over and grow-the-window paths.
    want = sorted(dataset.expected[("orders", 0)] + dataset.expected[("orders", 1)], key=lambda x: (x[2], x[3], x[4]))
    assert scan(dataset, "orders", window_bytes=window) == want


def test_remote_segments_decode_through_the_plugin(dataset: Dataset) -> None:
    assert scan(dataset, "tiered") == dataset.expected[("tiered", 0)]


def _damaged_copy(dataset: Dataset, tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(dataset.data / "events-0", target / "events-0")
    return target / "events-0" / "00000000000000000000.log"


def test_a_bad_crc_is_an_error_unless_checks_are_off(dataset: Dataset, tmp_path: Path) -> None:
    log_file = _damaged_copy(dataset, tmp_path)
    raw = bytearray(log_file.read_bytes())
    raw[-3] ^= 0xFF  # inside the last batch's value
    log_file.write_bytes(bytes(raw))
    rng = ScanRange("events", 0, 0, 8, log_path=str(log_file))
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(read_range(rng, include_headers=False))
    rows = pa.Table.from_batches(list(read_range(rng, include_headers=False, check_crcs=False)))
    assert rows.num_rows == 8


def test_a_malformed_record_is_an_error(dataset: Dataset, tmp_path: Path) -> None:
    log_file = _damaged_copy(dataset, tmp_path)
    raw = bytearray(log_file.read_bytes())
    raw[61] = 0x7F  # the first record's length varint: far more than the batch holds
    log_file.write_bytes(bytes(raw))
    with pytest.raises(CorruptRecordError, match="malformed record"):
        list(read_range(ScanRange("events", 0, 0, 8, log_path=str(log_file)), include_headers=False,
                        check_crcs=False))


def test_a_torn_or_zero_filled_tail_ends_the_log(dataset: Dataset, tmp_path: Path) -> None:
    log_file = _damaged_copy(dataset, tmp_path)
    raw = log_file.read_bytes()
    log_file.write_bytes(raw[:-10])  # the last batch torn
    rng = ScanRange("events", 0, 0, 8, log_path=str(log_file))
    assert sum(b.num_rows for b in read_range(rng, include_headers=False)) == 7
    log_file.write_bytes(raw + bytes(4096))  # a preallocated, never-written tail
    assert sum(b.num_rows for b in read_range(rng, include_headers=False)) == 8


def test_option_rules() -> None:
    base = {"path": "/nowhere", "subscribe": "t"}
    with pytest.raises(TierlogOptionError, match="path"):
        parse_options({"subscribe": "t"})
    with pytest.raises(TierlogOptionError, match="true or false"):
        parse_options({**base, "includeHeaders": "yes"})
    with pytest.raises(TierlogOptionError, match="positive integer"):
        parse_options({**base, "minPartitions": "0"})
    with pytest.raises(TierlogOptionError, match="not valid for streaming"):
        parse_options({**base, "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(TierlogOptionError, match="error or latest"):
        parse_options({**base, "startingOffsetsByTimestampStrategy": "maybe"})
    opts = parse_options({**base, "startingOffsets": '{"t": {"0": -2}}', "startingTimestamp": "5"})
    assert opts.starting.kind == "timestamp"  # the global timestamp wins, as in Spark
    assert parse_options(base, streaming=True).starting.kind == "latest"
    remote = parse_options({**base, "rsm.config.dir": "/r"}).remote
    assert remote is not None and dict(remote.props)["dir"] == "/r"


def test_split_ranges_and_rate_limit() -> None:
    ranges = [ScanRange("t", 0, 0, 100, log_path="a"), ScanRange("t", 1, 0, 10, log_path="b")]
    split = split_ranges(ranges, 8)
    assert len(split) >= 8
    assert sum(r.end_offset - r.start_offset for r in split) == 110
    assert split_ranges(ranges, None) == ranges
    capped = split_ranges(ranges, None, 30)
    assert max(r.end_offset - r.start_offset for r in capped) <= 30 and len(capped) == 5
    limited = _rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 100, ("t", 1): 10}, 11)
    assert limited == {("t", 0): 10, ("t", 1): 1}


def test_pack_ranges_into_input_partitions(tmp_path: Path) -> None:
    def seg(name: str, size: int, lo: int, hi: int) -> ScanRange:
        path = tmp_path / name
        path.write_bytes(b"\0" * size)
        return ScanRange("t", 0, lo, hi, log_path=str(path))

    ranges = [seg("a", 60, 0, 10), seg("b", 60, 10, 20), seg("c", 30, 20, 30), seg("d", 200, 30, 40)]
    opts = parse_options({"path": str(tmp_path), "subscribe": "t", "maxBytesPerPartition": "130"})
    # In order, up to 130 bytes a pack; a range bigger than that alone.
    assert [[r.start_offset for r in p] for p in pack_ranges(ranges, opts, None)] == [[0, 10], [20], [30]]
    capped = parse_options({"path": str(tmp_path), "subscribe": "t", "maxBytesPerPartition": "1000",
                            "maxRecordsPerPartition": "20"})
    assert [[r.start_offset for r in p] for p in pack_ranges(ranges, capped, None)] == [[0, 10], [20, 30]]
    split = parse_options({"path": str(tmp_path), "subscribe": "t", "minPartitions": "2"})
    assert pack_ranges(ranges, split, None) == [(r,) for r in ranges]
    # The default: Spark's rule for files, at least 4 MiB a pack: these tiny segments all in one.
    default = parse_options({"path": str(tmp_path), "subscribe": "t"})
    assert pack_ranges(ranges, default, 2) == [tuple(ranges)]
    broker_read = ScanRange("t", 0, 40, 50)  # no size known: never packed
    assert pack_ranges([*ranges, broker_read], default, 2) == [tuple(ranges), (broker_read,)]


def test_last_stable_offset_from_the_snapshot_and_from_a_header_replay(dataset: Dataset, tmp_path: Path) -> None:
    from tierlog.pipeline.catalog import discover, last_stable_offset

    logs = discover([dataset.data])
    assert last_stable_offset(logs[("opentxn", 0)]) == 3  # the open transaction's first offset
    assert last_stable_offset(logs[("orders", 0)]) == dataset.log_end[("orders", 0)]
    # Without the snapshot at the log end the headers after the previous one are replayed instead.
    copy = tmp_path / "data"
    shutil.copytree(dataset.data / "opentxn-0", copy / "opentxn-0")
    for snapshot in (copy / "opentxn-0").glob("*.snapshot"):
        snapshot.unlink()
    assert last_stable_offset(discover([copy])[("opentxn", 0)]) == 3
