"""The docs' worked examples run: every shell block of ``docs/operations.md`` and of each
``docs/seeds/*.md`` page runs in order, for real, in one shell per page (``walkthrough.py``: only the
ports are rewritten), and each command must exit 0. The claims each page makes about what a command
shows are checked below; a check whose command disappeared from its page fails too, so the two stay
in step. Pages without commands (architecture) must not hide any: every fenced block declares what
it is."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.integration.walkthrough import (
    REPO,
    Check,
    Expectation,
    Result,
    Session,
    contains,
    has_lines,
    matches,
    page_commands,
    run_page,
    table,
)

pytestmark = pytest.mark.integration

DOCS = REPO / "docs"
WAIT_FOR_BROKER = r'^until grep -qs "tierlog listening on" tierlog\.log; do kill -0 %\d \|\| break; sleep 0\.2; done$'


def broker_log(session: Session) -> str:
    return (session.directory / "tierlog.log").read_text()


def listening(session: Session) -> Check:
    def check(r: Result) -> None:
        log = broker_log(session)
        assert f"tierlog listening on 127.0.0.1:{session.port}" in log, f"the broker did not start:\n{log[-3000:]}"
    return check


def stopped_cleanly(session: Session) -> Check:
    def check(r: Result) -> None:
        log = broker_log(session)
        assert "broker stopped cleanly" in log, log[-3000:]
    return check


def lines_count(n: int) -> Check:
    def check(r: Result) -> None:
        assert r.stdout.strip() == str(n), f"expected {n}"
    return check


def tier_row(partition: str, **want: str) -> Check:
    def check(r: Result) -> None:
        rows = {x["PARTITION"]: x for x in table(r.stdout, "PARTITION")}
        assert partition in rows, f"{partition} is not in the table"
        got = {k: rows[partition][k] for k in want}
        assert got == want, got
    return check


def log_start(expected: str) -> Check:
    def check(r: Result) -> None:
        assert [x["LOG-START"] for x in table(r.stdout, "PARTITION")] == [expected]
    return check


def broker_lifecycle(session: Session) -> list[Expectation]:
    """What every page does the same way: activate, start a broker in the background, wait, stop it."""
    return [
        Expectation(r"^source \.venv/bin/activate$"),
        Expectation(r"^tierlog serve "),
        Expectation(WAIT_FOR_BROKER, listening(session)),
        Expectation(r"^kill %\d; wait %\d$", stopped_cleanly(session)),
    ]


# -- the pages ---------------------------------------------------------------------------------------


def seed000(s: Session) -> list[Expectation]:
    return [
        *broker_lifecycle(s),
        Expectation(r"^tierlog topics create payments ", has_lines("created topic payments with 3 partitions")),
        Expectation(r'^grep "metadata snapshot written"', matches(r"metadata snapshot written file=\d{20}-0000000000"
                                                                    r"\.checkpoint end_offset=\d+ size_bytes=\d+ "
                                                                    r"reason=max_interval ")),
        Expectation(r"^ls tierlog-data/__cluster_metadata-0/\*\.checkpoint$", matches(r"^tierlog-data/__cluster_metadata-0/\d{20}-0000000000\.checkpoint$")),
        Expectation(r"^curl .*tierlog_metadata_snapshots_total", _time_snapshots),
        Expectation(r"^ls tierlog-data/__cluster_metadata-0/\*\.checkpoint \| wc -l$", _snapshot_counts()),
        Expectation(r"^tierlog topics alter payments --config retention\.ms=86400000$"),
        Expectation(r"^tierlog metadata show --data-dir tierlog-data --topic payments$",
                    matches(r"^# tierlog-data/__cluster_metadata-0: \d{20}-0000000000\.checkpoint \+ 0 records from the log$")),
        Expectation(r"^python - <<'EOF'\nfrom confluent_kafka\.admin ", has_lines("time-based metadata snapshots off")),
        Expectation(r"^tierlog topics alter payments --config retention\.ms=3600000$"),
        Expectation(r'^until tierlog metadata show --data-dir tierlog-data --topic payments \| grep -q " \+ 0 records from '
                    r'the log\$"; do kill -0 %1 \|\| break; sleep 0\.2; done$'),
        Expectation(r"^tierlog metadata show --data-dir tierlog-data --topic payments \| head -1$",
                    matches(r"^# tierlog-data/__cluster_metadata-0: \d{20}-0000000000\.checkpoint \+ [1-9]\d* records "
                            r"from the log$")),
        *_feature_change(),
    ]


_DESCRIBE = re.compile(r"^Feature: metadata\.version\tSupportedMinVersion: 3\.0-IV1\tSupportedMaxVersion: 3\.9-IV0\t"
                       r"FinalizedVersionLevel: (\S+)\tEpoch: (\d+)\n"
                       r"Feature: transaction\.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\t"
                       r"FinalizedVersionLevel: 0\tEpoch: (\d+)$")


def _feature_change() -> list[Expectation]:
    """Seed 000's third trigger: `features describe` before and after a downgrade (the level, and the
    epoch that names the change's offset), the snapshot the change wrote at once (ending right after
    that offset, with the time trigger off), a refused downgrade, and the upgrade back."""
    epochs: list[int] = []

    def describe(r: Result) -> None:
        m = _DESCRIBE.match(r.stdout.strip())
        assert m, r.stdout
        assert m.group(1) == ["3.9-IV0", "3.8-IV0"][len(epochs)] and m.group(2) == m.group(3), r.stdout
        epochs.append(int(m.group(2)))

    def newest_snapshot(r: Result) -> None:
        assert r.stdout.strip() == f"tierlog-data/__cluster_metadata-0/{epochs[-1] + 1:020d}-0000000000.checkpoint", \
            (r.stdout, epochs)

    def refused(r: Result) -> None:
        assert "exit code 1" in r.stdout.splitlines(), r.stdout
        assert "Refusing to perform the requested downgrade because it might delete metadata information." in r.stderr

    def two_version_snapshots(r: Result) -> None:
        lines = r.stdout.splitlines()
        assert len(lines) == 2 and all("metadata snapshot written" in line for line in lines), lines

    return [
        Expectation(r"^tierlog features describe$", describe),
        Expectation(r"^tierlog features downgrade --metadata 3\.8-IV0$", has_lines("metadata.version was downgraded to 20.")),
        Expectation(r"^ls tierlog-data/__cluster_metadata-0/\*\.checkpoint \| tail -1$", newest_snapshot),
        Expectation(r"^tierlog features downgrade --metadata 3\.7-IV1 \|\| echo", refused),
        Expectation(r"^tierlog features upgrade --metadata 3\.9-IV0 --dry-run$",
                    has_lines("metadata.version can be upgraded to 21.")),
        Expectation(r"^tierlog features upgrade --metadata 3\.9-IV0$", has_lines("metadata.version was upgraded to 21.")),
        Expectation(r'^grep "reason=metadata_version_changed" tierlog\.log$', two_version_snapshots),
        Expectation(r"^tierlog metadata show --data-dir tierlog-data \| head -6$",
                    matches(r"^  metadata\.version +21 +3\.9-IV0$")),
    ]


def _snapshot_counts() -> Check:
    """The page counts the snapshots three times: after an idle spell (however many there were: one
    holds the topic, and a slow start may have let the startup records get one of their own), one
    more after a change, none more after a change with the time trigger off."""
    seen: list[int] = []

    def check(r: Result) -> None:
        seen.append(int(r.stdout.strip()))
        assert seen[0] >= 1 and seen[1:] == [seen[0] + 1, seen[0] + 1][:len(seen) - 1], seen
    return check


def _time_snapshots(r: Result) -> None:
    counts = dict(re.findall(r'^tierlog_metadata_snapshots_total\{reason="(\w+)"\} ([\d.]+)$', r.stdout, re.MULTILINE))
    assert float(counts["max_interval"]) >= 1 and counts["max_bytes"] == counts["requested"] == "0.0", counts


def seed001(s: Session) -> list[Expectation]:
    return [
        *broker_lifecycle(s),
        Expectation(r"^tierlog topics create invoices "),
        Expectation(r"^for i in \$\(seq 1 5\); do seq 1 40 \| tierlog produce invoices -X enable\.idempotence=true"),
        Expectation(r"^rm tierlog-data/invoices-0/\*\.snapshot$"),
        Expectation(r"^ls tierlog-data/invoices-0/$", lambda r: _no_snapshots(r)),
        Expectation(r"^tierlog topics alter invoices --config remote\.storage\.enable=true$"),
        Expectation(r'^until \[ "\$\(grep -c "rebuilt the producer snapshot" tierlog\.log\)" -ge 2 \]; do kill -0 %1 '),
        Expectation(r'^grep "rebuilt the producer snapshot"', _rebuilt_both),
        Expectation(r"^tierlog tier status$", tier_row("invoices-0", **{"TIERED-TO": "159", "SEGMENTS": "2", "LAG-SEGMENTS": "0"}),
                    eventually=True),
        Expectation(r"^tierlog dump-log tierlog-data-remote/.*/00000000000000000080-\*\.snapshot$", _four_producers),
        Expectation(r"^ls tierlog-data/invoices-0/\*\.snapshot$",
                    has_lines("tierlog-data/invoices-0/00000000000000000080.snapshot",
                              "tierlog-data/invoices-0/00000000000000000160.snapshot")),
    ]


def _no_snapshots(r: Result) -> None:
    names = r.stdout.split()
    assert "00000000000000000080.log" in names and not [n for n in names if n.endswith(".snapshot")], names


def _rebuilt_both(r: Result) -> None:
    found = re.findall(r"rebuilt the producer snapshot (\d{20})\.snapshot for segment (\d+) of invoices-0 "
                       r"from offset 0 \(seed 001\): it was taken from a producer state that knows no producer below "
                       r"offset 200", r.stdout)
    assert found == [("00000000000000000080", "0"), ("00000000000000000160", "80")], found


def _four_producers(r: Result) -> None:
    producers = re.findall(r"^producerId: (\d+) .* lastOffset: (\d+) ", r.stdout, re.MULTILINE)
    assert [int(last) for _, last in producers] == [39, 79, 119, 159], producers
    assert len({pid for pid, _ in producers}) == 4


def seed002(s: Session) -> list[Expectation]:
    return [
        Expectation(r"^source \.venv/bin/activate$"),
        Expectation(r"^moto_server -H 127\.0\.0\.1 -p 5000 "),
        Expectation(r"^until curl -s -o /dev/null http://127\.0\.0\.1:5000/"),
        Expectation(r"^curl -s -X PUT http://127\.0\.0\.1:5000/tierlog-tier$"),
        Expectation(r"^export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test$"),
        Expectation(r"^cat > s3\.properties <<'EOF'\n"),
        Expectation(r"^tierlog serve --config s3\.properties "),
        Expectation(WAIT_FOR_BROKER, listening(s)),
        Expectation(r"^tierlog topics create events "),
        Expectation(r"^for i in 1 2 3; do seq 1 50 \| tierlog produce events"),
        Expectation(r'^until tierlog tier status --config s3\.properties \| grep -Eq "\^events-0 \+stopped "; do kill -0 %2 '),
        Expectation(r'^until grep -qs "remote copy finished topic=events" tierlog\.log; do kill -0 %2 '),
        Expectation(r'^grep "exceeds remote\.log\.metadata\.custom\.metadata\.max\.bytes"',
                    matches(r"custom metadata of 72 bytes for segment 0 of events-0 exceeds "
                            r"remote\.log\.metadata\.custom\.metadata\.max\.bytes=40; deleting the uploaded data$")),
        Expectation(r"^tierlog tier status --config s3\.properties$", _s3_status()),
        Expectation(r"^curl -s \"http://127\.0\.0\.1:5000/tierlog-tier\?list-type=2\" .*grep -v /_manifest \|",
                    _bucket_counts()),
        Expectation(r"^kill %2; wait %2$", stopped_cleanly(s)),
        Expectation(r"^sed -i 's/\^remote\.log\.metadata\.custom\.metadata\.max\.bytes=40\$/"),
        Expectation(r"^curl -s http://127\.0\.0\.1:9404/metrics \| grep '\^tierlog_remote_copy_task_stopped'$",
                    has_lines('tierlog_remote_copy_task_stopped{partition="0",topic="events"} 0.0'), eventually=True),
        Expectation(r"^tierlog consume events --from-beginning ", has_lines("Offset:0\t1")),
        Expectation(r"^kill %1$"),
    ]


def _s3_status() -> Check:
    """Twice: stopped by seed 002 with the segment in the backlog; after the restart (read once the
    broker stopped), active with the segment tiered and the uploaded size from the custom metadata."""
    calls: list[int] = []

    def check(r: Result) -> None:
        calls.append(1)
        row = {x["PARTITION"]: x for x in table(r.stdout, "PARTITION")}["events-0"]
        if len(calls) == 1:
            assert (row["TASK"], row["TIERED-TO"], row["SEGMENTS"], row["LAG-SEGMENTS"]) == ("stopped", "-1", "0", "1"), row
            assert "exceeds the limit of 40 bytes" in r.stdout
        else:
            assert (row["TASK"], row["TIERED-TO"], row["SEGMENTS"], row["LAG-SEGMENTS"]) == ("active", "99", "1", "0"), row
            # The plugin's uploaded size (segment, indexes, snapshot, epochs) is more than the segment.
            assert int(row["REMOTE-BYTES"]) > 1004, row
    return check


def _bucket_counts() -> Check:
    calls: list[str] = []

    def check(r: Result) -> None:
        calls.append(r.stdout.strip())
        assert calls == ["0", "5"][:len(calls)], calls
    return check


def seed003(s: Session) -> list[Expectation]:
    def startup_line(unchecked: str, rebuilt: str) -> Check:
        return matches(rf"loaded \d+ logs with \d+ segments in [\d.]+ s \(0 recovered, {rebuilt} indexes rebuilt, "
                       rf"{unchecked} unchecked\)$")
    starts: list[int] = []

    def startup(r: Result) -> None:
        starts.append(1)
        # First lazy start: nine inactive segments unchecked; second (after the damage, default
        # settings): everything checked at startup and the damaged index rebuilt.
        (startup_line("9", "0") if len(starts) == 1 else startup_line("0", "1"))(r)

    return [
        *broker_lifecycle(s),
        Expectation(r"^tierlog topics create clicks "),
        Expectation(r"^for i in \$\(seq 1 20\); do seq 1 50 \| kcat -P -b 127\.0\.0\.1:9092 -t clicks -X linger\.ms=2000 "
                    r"-X batch\.num\.messages=50; done$"),
        Expectation(r"^ls tierlog-data/clicks-0/\*\.log \| wc -l$", lines_count(10)),
        Expectation(r'^grep "loaded \.\* logs" tierlog\.log$', startup),
        Expectation(r'^until grep -qs "lazy segment check finished" tierlog\.log; do kill -0 %1 '),
        Expectation(r'^grep "lazy segment check finished"', matches(r"lazy segment check finished checked_segments=9 ")),
        Expectation(r"^truncate -s 5 tierlog-data/clicks-0/00000000000000000500\.index$"),
        Expectation(r"^tierlog consume clicks --offset 500 ", has_lines("Offset:500\t1")),
        Expectation(r'^grep "failed its check"', matches(r"segment 500 of clicks-0 failed its check \(offset index file "
                                                         r".*00000000000000000500\.index is corrupt: found 5 bytes, which "
                                                         r"is not a multiple of 8\); rebuilding its indexes and checking "
                                                         r"every earlier segment first$")),
        Expectation(r"^tierlog dump-log --verify-index-only ", contains("00000000000000000500.index passed sanity check.")),
    ]


def seed004(s: Session) -> list[Expectation]:
    return [
        *broker_lifecycle(s),
        Expectation(r"^tierlog topics create ledger "),
        Expectation(r"^python - <<'EOF'\nfrom confluent_kafka import Producer"),
        Expectation(r"^ls tierlog-data/ledger-0/\*\.log$",
                    has_lines(*(f"tierlog-data/ledger-0/{b:020d}.log" for b in (0, 40, 80, 120)))),
        Expectation(r"^tierlog spark retention-preview ", _preview),
        Expectation(r"^tierlog topics alter ledger --config retention\.min\.timestamp=1704326400000$",
                    has_lines("altered topic ledger: set retention.min.timestamp=1704326400000")),
        Expectation(r'^until \[ "\$\(grep -c "reason=timestamp_floor" tierlog\.log\)" -ge 2 \]; do kill -0 %1 '),
        Expectation(r'^grep "reason=timestamp_floor"', _floor_deletions, eventually=True),
        Expectation(r"^tierlog topics describe ledger$", log_start("80"), eventually=True),
        Expectation(r"^curl .*tierlog_log_segment_deletions",
                    has_lines('tierlog_log_segment_deletions_total{reason="timestamp_floor"} 2.0')),
        Expectation(r"^tierlog consume ledger --from-beginning ", has_lines("CreateTime:1704758400000\tOffset:80\tjan9-0")),
    ]


def _preview(r: Result) -> None:
    rows = table(r.stdout, "TOPIC")
    got = [(x["TIER"], x["BASE_OFFSET"], x["END_OFFSET"], x["LARGEST_TIMESTAMP_MS"], x["REASON"]) for x in rows]
    assert got == [("local", "0", "40", "1704067200039", "timestamp_floor"),
                   ("local", "40", "80", "1704153600039", "timestamp_floor")], got


def _floor_deletions(r: Result) -> None:
    bases = re.findall(r"segment deleted topic=ledger partition=0 base_offset=(\d+) reason=timestamp_floor ", r.stdout)
    assert bases == ["0", "40"], bases


def operations(s: Session) -> list[Expectation]:
    return [
        *broker_lifecycle(s),
        Expectation(r"^tierlog topics create audit "),
        Expectation(r"^for i in \$\(seq 1 6\); do seq 1 50 \| sed"),
        Expectation(r'^until tierlog tier status \| grep -Eq "\^audit-0 \+active \+249 "; do kill -0 %1 '),
        Expectation(r"^tierlog tier status$", tier_row("audit-0", **{"TIERED-TO": "249", "SEGMENTS": "5", "LAG-SEGMENTS": "0"}),
                    eventually=True),
        Expectation(r"^tierlog tier status \| grep audit-0$", matches(r"^audit-0 +active +249 ")),
        Expectation(r"^rm -r tierlog-data/audit-0$"),
        Expectation(r'^grep "restored from the remote tier" tierlog\.log$',
                    matches(r"audit-0 restored from the remote tier: the local log held nothing; it now starts at "
                            r"offset 250 after the remote tier's end offset 249")),
        Expectation(r"^tierlog consume audit --offset 150 --max-messages 100 .*\| wc -l$", lines_count(100)),
        Expectation(r'^seq 1 3 \| sed "s/\^/after-/" \| tierlog produce audit$'),
        Expectation(r"^tierlog consume audit --offset 250 --max-messages 1 ", has_lines("Offset:250\tafter-1")),
        Expectation(r"^tierlog tier status --json$", matches(r'"highest_tiered_offset": 249, .*"topic": "audit"')),
        Expectation(r"^tierlog metadata snapshot --data-dir tierlog-data --output-dir tierlog-backups$",
                    matches(r"^wrote tierlog-backups/\d{20}-\d{10}\.checkpoint ")),
        Expectation(r"^tierlog metadata show --snapshot ", matches(r"^  audit +remote\.storage\.enable +true$")),
        Expectation(r"^tierlog topics create scratch$", has_lines("created topic scratch with 1 partition")),
        Expectation(r"^tierlog metadata restore ", matches(r"^restored tierlog-backups/.*: the metadata log now starts at "
                                                          r"offset \d+ \(epoch 0\); 1 topics, 1 partitions$")),
        Expectation(r'^grep "its topic is not in the metadata"',
                    matches(r"stray log topic=scratch partition=0 \(scratch-0\): its topic is not in the metadata; kept")),
        Expectation(r"^ls -d tierlog-data/scratch-0\.\*-stray$", matches(r"^tierlog-data/scratch-0\.[0-9a-f]{32}-stray$")),
        Expectation(r"^tierlog topics list$", lambda r: _only_audit(r)),
        Expectation(r"^printf 'X' \| dd of=tierlog-data/audit-0/00000000000000000100\.log "),
        Expectation(r"^tierlog dump-log --strict ", has_lines("exit code 1")),
        Expectation(r"^tierlog spark verify ", _verify),
        Expectation(r"^tierlog consume audit --offset 98 ", lambda r: _served_across_damage(r)),
        Expectation(r'^grep "damaged segment"', matches(r"damaged segment topic=audit partition=0 .*00000000000000000100\.log "
                                                       r"at byte 0, offset 100: CRC mismatch")),
        Expectation(r"^mkdir -p quarantine/audit-0$"),
        Expectation(r"^for base in .*; do mv tierlog-data/audit-0/\$base\.\* quarantine/audit-0/; done$"),
        Expectation(r"^tierlog consume audit --from-beginning --max-messages 300 .*\| wc -l$", lines_count(300)),
        Expectation(r"^python - <<'EOF'\nfrom confluent_kafka import TopicPartition", has_lines("low watermark now 150")),
        Expectation(r"""^until \[ "\$\(tierlog topics describe audit \| awk '\$1 == "0" \{print \$5\}'\)" = 150 \]; """),
        Expectation(r"^tierlog topics describe audit$", log_start("150"), eventually=True),
        Expectation(r"^curl -s http://127\.0\.0\.1:9404/metrics ", contains("tierlog_log_unchecked_segments 0.0",
                                                                            'tierlog_remote_copy_lag_segments{partition="0",topic="audit"}')),
    ]


def _only_audit(r: Result) -> None:
    assert [line.split()[0] for line in r.stdout.splitlines()[1:]] == ["audit"], r.stdout


def _verify(r: Result) -> None:
    rows = [x for x in table(r.stdout, "TOPIC") if x["TOPIC"] == "audit"]
    bad = [(x["TIER"], x["BASE_OFFSET"]) for x in rows if x["OK"] != "True"]
    assert bad == [("local", "100")], bad
    assert ("remote", "100", "True") in [(x["TIER"], x["BASE_OFFSET"], x["OK"]) for x in rows]
    assert r.stdout.splitlines()[-1] == "exit code 3"


def _served_across_damage(r: Result) -> None:
    # 98 and 99 from the local segment before the damage, 100 on from the remote copy.
    assert r.stdout.splitlines() == ["Offset:98\taudit-2-49", "Offset:99\taudit-2-50", "Offset:100\taudit-3-1",
                                     "Offset:101\taudit-3-2", "Offset:102\taudit-3-3"], r.stdout


PAGES = {
    "operations.md": operations,
    "seeds/000-metadata-snapshot-interval.md": seed000,
    "seeds/001-producer-snapshot-rebuild.md": seed001,
    "seeds/002-custom-remote-metadata.md": seed002,
    "seeds/003-lazy-startup-sanity-check.md": seed003,
    "seeds/004-timestamp-floor-retention.md": seed004,
}


def test_every_page_with_commands_is_run_and_no_page_hides_one() -> None:
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    with_commands = [p for p in pages if page_commands((DOCS / p).read_text())]
    assert sorted(PAGES) == with_commands, "a docs page with shell blocks has no test here (or lost its commands)"
    assert {f"seeds/{p.name}" for p in (DOCS / "seeds").glob("*.md")} == {p for p in PAGES if p.startswith("seeds/")}
    assert len([p for p in PAGES if p.startswith("seeds/")]) == 5, "one page per seed feature"


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(PAGES))
def test_docs_page_runs_for_real(page: str, tmp_path: Path) -> None:
    commands = page_commands((DOCS / page).read_text())
    session = Session(tmp_path / "docs")
    started = time.monotonic()
    try:
        run_page(session, commands, PAGES[page](session), page=f"docs/{page}", every_command_checked=False)
    finally:
        session.close()
        # Where the page's time goes (pytest shows it with -s, or under a failure): the slowest commands.
        slowest = sorted(session.results, key=lambda r: -r.seconds)[:8]
        print(f"docs/{page}: {len(session.results)} of {len(commands)} commands run in "
              f"{time.monotonic() - started:.1f} s; slowest:")
        for r in slowest:
            print(f"  {r.seconds:6.1f} s  {r.command.splitlines()[0][:110]}")
