"""The long version of the reliability harness (issue 10); ``tests/reliability/`` runs the short one.

Sections (``--only`` picks some):

  crash    ``--kills`` SIGKILLs (some during startup) under an idempotent acks=all librdkafka producer
           and a committing consumer group; every acknowledged record present exactly once, in order,
           commits intact.
  damage   ``--damage-rounds`` rounds of byte flips and truncations in segments, indexes, producer
           snapshots, checkpoints and metadata snapshots after a clean shutdown or a SIGKILL.
  remote   a flaky remote storage plugin and an S3 server killed during copies; partitions wiped and
           restored from the remote tier, ``--restore-rounds`` rounds; ``--delete-rounds`` rounds of
           seed 002 uploads whose plugin deletes fail (retried, or given up and settled).
  hostile  ``--fuzz-inputs`` fuzzed frames and mutated requests, stalled, slow and never-reading
           clients, ``--connections`` connections at once.
  handshake ``--handshake-attempts`` hostile connections on SASL_PLAINTEXT, SASL_SSL and SSL listeners:
           fuzzed ClientHellos, SASL requests out of order, garbled/oversized/replayed SCRAM and PLAIN
           messages, stalled handshakes; Kafka's error or a close each time, a good client served.
  txn      a transactional consume-transform-produce application (its own process) while it and the broker
           are SIGKILLed ``--txn-kills`` times; ``--txn-inputs`` records, read_committed output exactly once.
  power    ``--cuts`` power cuts (lazyfs: every write not fsynced undone) after SIGKILLs under an idempotent
           acks=all librdkafka producer, a committing group and topic creations, with durable acks: nothing
           acknowledged lost or duplicated, no commit or topic lost; then ``--cuts-none`` cuts with
           ``log.durable.acks=none`` (Kafka's behaviour), whose losses are counted (the harness bites).
  load     ``--load-connections`` concurrent connections over ``--load-partitions`` partitions (RSS).

Prints each section's figures and writes them, with the command and the date, to ``--out``
(default docs/reliability.md; sections not run keep their previous text).

    .venv/bin/python bench/chaos.py                       # everything, the long version
    .venv/bin/python bench/chaos.py --only crash --kills 60
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the scenarios live in tests/reliability/
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line  # noqa: E402


@dataclass
class Section:
    """What one section measured: a heading, a Markdown body (tables) and whether it kept every promise."""

    name: str
    title: str
    body: str
    ok: bool


def table(rows: list[tuple[str, object]], head: tuple[str, str] = ("figure", "value")) -> str:
    def fmt(v: object) -> str:
        if isinstance(v, float):
            return f"{v:,.2f}"
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return str(v)

    lines = [f"| {head[0]} | {head[1]} |", "|---|---|"]
    lines += [f"| {k} | {fmt(v)} |" for k, v in rows]
    return "\n".join(lines)


def crash(args: argparse.Namespace, work: Path) -> Section:
    from tests.reliability.crash_loop import run_crash_loop

    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    (work / "crash").mkdir()
    r = run_crash_loop(work / "crash" / "data", kills=args.kills, partitions=3, rate=args.rate, seed=seed,
                       progress=True)
    restarts = sorted(r.restart_seconds)
    rows: list[tuple[str, object]] = [
        ("SIGKILLs survived (of them while starting)", f"{r.kills} ({r.kills_while_starting})"),
        ("records sent / acknowledged", f"{r.sent:,} / {r.acked:,}"),
        ("records in the log at the end", r.records_in_log),
        ("**lost** (must be 0)", r.lost),
        ("**duplicated** (must be 0)", r.duplicated),
        ("out of order / at another offset than acknowledged", f"{r.out_of_order} / {r.wrong_offset}"),
        ("batches served that fail their CRC", r.bad_batches),
        ("delivery failures / fatal producer errors", f"{r.delivery_failures} / {r.producer_fatal_errors}"),
        ("group commits acknowledged / regressed after a restart", f"{r.commits} / {len(r.commit_regressions)}"),
        ("restart to listening, median / max", f"{restarts[len(restarts) // 2]:.2f} s / {restarts[-1]:.2f} s"
         if restarts else "-"),
        ("broker peak RSS", f"{r.peak_rss_bytes / 2**20:.0f} MiB"),
        ("duration", f"{r.seconds:.0f} s (seed {seed})"),
    ]
    return Section("crash", "Crash loop (SIGKILL under an idempotent producer)", table(rows), r.ok)


def power(args: argparse.Namespace, work: Path) -> Section:
    from tests.reliability.power_loss import chosen_harness, harness_unavailable, run_power_loss

    harness = chosen_harness()  # TIERLOG_POWER_HARNESS=lazyfs|shim, else lazyfs where FUSE works
    title = f"Power cuts ({harness})"
    why_not = harness_unavailable(harness)
    if why_not is not None:
        return Section("power", title, f"Not run: the {harness} harness cannot run here ({why_not}).", False)
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    runs = {}
    for mode, cuts in (("all", args.cuts), ("tiered", args.cuts_tiered), ("none", args.cuts_none)):
        if cuts <= 0:
            continue
        print(f"-- {mode}: {cuts} cuts", flush=True)
        (work / f"power-{mode}").mkdir()
        runs[mode] = run_power_loss(work / f"power-{mode}", cuts=cuts, durable_acks="all" if mode == "tiered" else mode,
                                    rate=args.power_rate, seed=seed, progress=True, tiered=mode == "tiered",
                                    harness=harness)

    def rows(r: Any) -> list[tuple[str, object]]:
        loop = r.loop
        lost_bytes = sorted(r.bytes_lost_at_cuts)
        return [
            ("harness", r.harness),
            *((("writable index mappings (stores not undone by the shim)", r.writable_maps),)
              if r.harness == "shim" else ()),
            ("power cuts (each after a SIGKILL)", r.cuts),
            ("un-fsynced bytes undone per cut, median / max",
             f"{lost_bytes[len(lost_bytes) // 2]:,} / {lost_bytes[-1]:,}" if lost_bytes else "-"),
            ("records sent / acknowledged", f"{loop.sent:,} / {loop.acked:,}"),
            ("records in the log at the end", loop.records_in_log),
            ("**acknowledged lost**", loop.lost),
            ("**duplicated**", loop.duplicated),
            ("out of order / at another offset than acknowledged", f"{loop.out_of_order} / {loop.wrong_offset}"),
            ("delivery failures / fatal producer errors", f"{loop.delivery_failures} / {loop.producer_fatal_errors}"),
            ("delivery failures by error", dict(loop.failure_reasons) or "-"),
            ("group commits acknowledged / regressed after a cut", f"{loop.commits} / {len(loop.commit_regressions)}"),
            ("topics created (one per start) / missing after a cut", f"{r.topics_created} / {len(r.topics_missing)}"),
            ("producer probe: batches acknowledged / in flight at a cut, kept / appended on retry / last one "
             "answered as a duplicate", f"{r.probe.batches_acknowledged} / {r.probe.retried_kept} / "
             f"{r.probe.retried_appended} / {r.probe.duplicates_answered}"),
            ("producer snapshots after cuts: read / taken by a cut / unreadable",
             f"{r.probe.snapshot_files_after_cuts} / {r.probe.snapshot_files_removed_by_cuts} / "
             f"{r.probe.snapshot_files_unreadable}"),
            ("**producer probe problems**", len(r.probe.problems)),
            ("duration", f"{loop.seconds:.0f} s"),
        ]

    body = (f"The crash loop of `tests/reliability/crash_loop.py` (3 partitions, {args.power_rate:,} records/s, "
            "256 KiB segments, idempotent acks=all librdkafka producer, a group committing every 300 records) "
            + ("with the broker's data on `tests/reliability/lazyfs.py`: after each SIGKILL (1-3 s of uptime) the "
               "filesystem is cut — every write not fsynced undone, every file or directory whose entry was not "
               "fsynced removed — and remounted"
               if harness == "lazyfs" else
               "with the broker under the LD_PRELOAD page-cache shim (`tests/reliability/pageshim.c`): after each "
               "SIGKILL (1-3 s of uptime) its journal is replayed backwards — every write not fsynced undone, "
               "every entry created, renamed or unlinked without a later fsync of its directory put back")
            + "; the broker restarts and every partition is read back. After "
            "each start a topic is created, and every acknowledged creation is checked after each later "
            f"cut (the metadata log). Seed {seed}.\n\n")
    if "all" in runs:
        body += f"### log.durable.acks=all (tierlog's default): must lose nothing\n\n{table(rows(runs['all']))}\n\n"
    if "tiered" in runs:
        body += ("### log.durable.acks=all with tiering (16 KiB segments tiered as they close, local.retention.bytes=1: "
                 "reads below the newest segment go through the remote log metadata journal, which goes through the "
                 "cuts; "
                 f"the remote directory is not): must lose nothing\n\n{table(rows(runs['tiered']))}\n\n")
    if "none" in runs:
        body += ("### log.durable.acks=none (Kafka's behaviour: acknowledged on append, flushed by flush.messages "
                 f"/ flush.ms): the harness bites\n\n{table(rows(runs['none']))}\n\n")
    durable_ok = all(runs[m].ok for m in ("all", "tiered") if m in runs)
    bites = "none" not in runs or runs["none"].loop.lost > 0
    return Section("power", title, body.rstrip(), durable_ok and bites)


def summary_table(summary: dict[str, object]) -> str:
    return table([(k.replace("_", " "), v if not isinstance(v, (dict, list)) else json.dumps(v, default=str))
                  for k, v in summary.items()])


def remote(args: argparse.Namespace, work: Path) -> Section:
    from tests.reliability.remote_deletes import run_failing_deletes
    from tests.reliability.remote_faults import run_flaky_plugin, run_s3_kills
    from tests.reliability.restore_rounds import run_restore_rounds

    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    flaky = run_flaky_plugin(work / "remote-flaky", seconds=args.remote_seconds, partitions=3, rate=1500,
                             broker_kills=6, topic_deletion=True, converge_timeout_s=120, seed=seed,
                             progress=True)
    s3 = run_s3_kills(work / "remote-s3", seconds=args.remote_seconds, partitions=3, rate=1500, s3_kills=12,
                      s3_freezes=6, s3_down_s=(0.3, 2.0), final_outage_s=10.0, broker_kills=4,
                      converge_timeout_s=180, seed=seed, progress=True)
    restore = run_restore_rounds(work / "remote-restore", rounds=args.restore_rounds, partitions=3,
                                 records_per_round=3000, seed=seed, progress=True)
    deletes = run_failing_deletes(work / "remote-deletes", rounds=args.delete_rounds, partitions=3, max_attempts=5,
                                  seed=seed, progress=True)
    body = (f"Fault phase {args.remote_seconds:.0f} s per scenario, 3 partitions, 1,500 records/s, seed {seed}.\n\n"
            f"### Flaky plugin (errors, timeouts, partial writes in copy, fetch and delete)\n\n"
            f"{summary_table(flaky.summary())}\n\n"
            f"### S3 (moto) SIGKILLed and frozen during copies and deletes\n\n{summary_table(s3.summary())}\n\n"
            f"### Partitions wiped and restored from the remote tier ({args.restore_rounds} rounds)\n\n"
            f"{summary_table(restore.summary())}\n\n"
            f"### Failing deletes of seed 002's refused uploads ({args.delete_rounds} rounds, 3 partitions, 5 "
            f"attempts; deletes fail 1-4 times then succeed, or always: given up, then tier retry-delete)\n\n"
            f"{summary_table(deletes.summary())}")
    return Section("remote", "Remote tier faults", body, flaky.ok and s3.ok and restore.ok and deletes.ok)


def _broker(work: Path, name: str, overrides: dict[str, str]) -> Any:
    from tests.reliability.harness import ChaosBroker

    (work / name).mkdir()
    return ChaosBroker(work / name / "data", overrides).start()


def hostile(args: argparse.Namespace, work: Path) -> Section:
    from tests.reliability.hostile_clients import MIB, connection_flood, connection_limits, fuzz, slow_clients

    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    overrides = {"socket.request.receive.timeout.ms": "5000", "connections.max.idle.ms": "10000",
                 "queued.max.request.bytes": str(128 * MIB), "auto.create.topics.enable": "false"}
    broker = _broker(work, "hostile", overrides)
    try:
        fuzzed = fuzz(broker, args.fuzz_inputs, seed=seed, failures_dir=work / "fuzz-failures")
        slow = slow_clients(broker, half_frame=500, slowloris=50, never_reading=20, fetches_per_reader=20_000,
                            partial=200, partial_declared_bytes=64 * MIB, partial_sent_bytes=8 * MIB)
    finally:
        stopped = broker.stop() == 0 if broker.alive() else False
    flood_broker = _broker(work, "flood", {"connections.max.idle.ms": "600000"})
    try:
        flood = connection_flood(flood_broker, args.connections)
    finally:
        flood_broker.stop()
    limits_broker = _broker(work, "limits", {"max.connections": "80", "max.connections.per.ip": "20",
                                             "max.connections.per.ip.overrides": "127.0.0.1:1000,127.0.0.3:35"})
    try:
        limits = connection_limits(limits_broker, {"127.0.0.2": 20, "127.0.0.3": 35}, extra=10)
    finally:
        limits_broker.stop()
    body = (f"### Fuzzed frames and mutated requests (seed {seed})\n\n{summary_table(fuzzed.summary())}\n\n"
            f"### Slow clients: half a frame then a stall, a byte a second, pipelined fetches never read, "
            f"requests declared large and sent in part\n\n{summary_table(slow.summary())}\n\n"
            f"### {args.connections:,} connections at once\n\n{summary_table(flood.summary())}\n\n"
            f"### Connection limits (max.connections=80, max.connections.per.ip=20 with overrides)\n\n"
            f"{summary_table(limits.summary())}\n\nBroker stopped cleanly after fuzzing: {stopped}.")
    return Section("hostile", "Hostile clients", body, fuzzed.ok and slow.ok and flood.ok and limits.ok and stopped)


def handshake(args: argparse.Namespace, work: Path) -> Section:
    import ssl

    from tests.reliability.sasl_fuzz import handshake_fuzz, prepare, secured_overrides
    from tests.security.conftest import SecureBroker

    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    load_before = os.getloadavg()[0]
    (work / "handshake").mkdir()
    overrides, _, ca_file = secured_overrides(work / "handshake")
    broker = SecureBroker(work / "handshake" / "data", overrides).start()
    try:
        prepare(broker)
        result = handshake_fuzz(broker, ssl.create_default_context(cafile=str(ca_file)), args.handshake_attempts,
                                seed=seed, concurrency=48, batch=1000, stalled=30)
    finally:
        stopped = broker.stop() == 0 if broker.alive() else False
    body = ("A broker with SASL_PLAINTEXT, SASL_SSL (PLAIN, SCRAM-SHA-512) and SSL listeners; each attempt is one "
            "connection of a hostile client (`tests/reliability/sasl_fuzz.py`, seed "
            f"{seed}): cut-short, garbled or random ClientHellos and plaintext requests on the TLS ports; unknown "
            "mechanisms, SaslAuthenticate before SaslHandshake, a second SaslHandshake, Produce/Fetch/Metadata/"
            "CreateTopics before authentication, garbled, oversized and truncated SCRAM and PLAIN messages, wrong "
            "nonces and proofs, a good exchange's messages replayed, the v0 raw-token flow with garbage, frames "
            "over the 512 KiB pre-authentication limit. Each outcome must be Kafka's error for the attempt "
            "(then the connection closed) or the close alone; between batches a SCRAM-SHA-512 client logs in, "
            "produces and fetches. Stalled connections (half a ClientHello, a SaslHandshake and then nothing, "
            "nothing at all) must be closed by the broker.\n\n"
            f"{summary_table(result.summary())}\n\nBroker stopped cleanly: {stopped}. Load average (1 min) "
            f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (2 cores, shared).")
    return Section("handshake", "Fuzzed TLS and SASL handshakes", body, result.ok and stopped)


def load_section(args: argparse.Namespace, work: Path) -> Section:
    from tests.reliability.load import load

    per_topic = 100
    topics = max(1, args.load_partitions // per_topic)
    broker = _broker(work, "load", {})
    try:
        result = load(broker, topics=topics, partitions_per_topic=per_topic, connections=args.load_connections,
                      rounds=3, restart=True)
    finally:
        broker.kill()
    body = (f"{args.load_connections:,} connections over {topics * per_topic:,} partitions "
            f"({topics} topics × {per_topic}), 3 rounds of metadata, produce and fetch on every connection, "
            f"then a restart. The stated bound is `tests/reliability/load.py: rss_bound` (idle RSS + fixed "
            f"slack + a bound per partition + a bound per connection).\n\n{summary_table(result.summary())}")
    return Section("load", "Load: connections × partitions", body, result.ok)


def damage(args: argparse.Namespace, work: Path) -> Section:
    from tests.reliability.disk_damage import plan_round, run_planned_round, summarize

    rng = random.Random(args.seed)
    results = []
    for i in range(args.damage_rounds):
        plan = plan_round(rng.randrange(1 << 31))
        result = run_planned_round(work / "damage", plan)
        results.append(result)
        print(f"round {i + 1}/{args.damage_rounds}: seed {plan.seed} "
              f"{'clean' if plan.clean_shutdown else 'SIGKILL'} {'lazy' if plan.lazy else 'full'} "
              f"{len(result.damages)} files damaged: {'ok' if result.ok else 'FAILED'}", flush=True)
        if not result.ok:
            print(result.describe(), flush=True)
    figures = summarize(results)
    body = ("Each round: 3 partitions, 3,000 records (plain and zstd batches) written by librdkafka, the broker "
            "stopped cleanly or SIGKILLed, then random byte flips or truncations in one file of each kind "
            "drawn; the broker restarted and every partition read back with each batch's CRC checked. A "
            "failed round replays with `plan_round(seed)` of `tests/reliability/disk_damage.py`.\n\n"
            f"{summary_table(figures)}")
    return Section("damage", "Disk damage", body, not figures["failed_rounds"] and figures["started"] == len(results))


def txn(args: argparse.Namespace, work: Path) -> Section:
    from tests.reliability.txn_loop import run_txn_loop

    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    r = run_txn_loop(work / "txn" / "data", inputs=args.txn_inputs, kills=args.txn_kills, partitions=3,
                     max_uptime_s=4.0, seed=seed, timeout_s=max(300.0, args.txn_kills * 15.0), progress=True,
                     force_both=True)
    rows: list[tuple[str, object]] = [
        ("input records (3 partitions)", r.inputs),
        ("SIGKILLs: broker / application / both at once",
         f"{r.broker_kills - (r.app_kills + r.broker_kills - r.kills)} / "
         f"{r.app_kills - (r.app_kills + r.broker_kills - r.kills)} / {r.app_kills + r.broker_kills - r.kills}"),
        ("application processes started", r.app_starts),
        ("application processes ended by their watchdog (a client call hung past its timeout)", r.app_exits),
        ("transactions committed / aborted by the application", f"{r.commits:,} / {r.aborts:,}"),
        ("producers rebuilt after a fatal error or timeout", r.fatal_restarts),
        ("all input consumed (offsets committed) at the end", r.finished),
        ("**lost** in the read_committed output (must be 0)", r.lost),
        ("**duplicated** in the read_committed output (must be 0)", r.duplicated),
        ("duration", f"{r.seconds:.0f} s (seed {seed})"),
    ]
    body = ("The application (`tests/reliability/txn_app.py`, confluent-kafka) reads `eos-in` from its group's "
            "committed offsets and writes each record to `eos-out` in transactions of up to 50 records with "
            "`send_offsets_to_transaction`; it rewinds after an aborted transaction and starts a new producer "
            "after a fatal error; a watchdog ends its process when a client call hangs past its timeout "
            "(librdkafka's `send_offsets_to_transaction` after a broker restart, confluentinc/librdkafka#5456), "
            "and the harness starts it again. Each round waits 0.5-4 s once what it restarted runs, then "
            "SIGKILLs the broker, the application or both and restarts them; a new application fences the "
            "killed one's epoch. At the end the output is read `read_committed` from offset 0.\n\n" + table(rows))
    return Section("txn", "Exactly once under SIGKILLs of broker and application", body, r.ok)


def _load_sections() -> dict[str, Callable[[argparse.Namespace, Path], Section]]:
    return {"crash": crash, "power": power, "damage": damage, "remote": remote, "hostile": hostile,
            "handshake": handshake, "txn": txn, "load": load_section}


BEGIN = "<!-- chaos:{name}:begin -->"
END = "<!-- chaos:{name}:end -->"


def write_doc(out: Path, sections: list[Section], command: str, order: list[str]) -> None:
    """Replace each run section's block in ``out``; keep the others as they were."""
    old = out.read_text() if out.exists() else ""
    blocks: dict[str, str] = {}
    for name in order:
        m = re.search(re.escape(BEGIN.format(name=name)) + r"\n(.*?)" + re.escape(END.format(name=name)), old, re.S)
        if m:
            blocks[name] = m.group(1)
    today = datetime.date.today().isoformat()
    for s in sections:
        verdict = "every promise kept" if s.ok else "**FAILED** — see the figures"
        blocks[s.name] = f"## {s.title}\n\n    {command}\n\n{today}: {verdict}.\n\n{s.body}\n\n"
    text = [HEADER]
    for name in order:
        if name in blocks:
            text.append(f"{BEGIN.format(name=name)}\n{blocks[name]}{END.format(name=name)}\n")
    out.write_text("\n".join(text))


HEADER = """# Reliability

Figures from `bench/chaos.py`, the long version of the harness in `tests/reliability/` (which the test
command runs in short). Each section says the command that produced it and when; the machine is the
2-core one the project is developed on, shared with other work while these ran.
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="", help="comma-separated sections (default: all)")
    p.add_argument("--kills", type=int, default=50)
    p.add_argument("--rate", type=int, default=3000, help="crash: records produced per second")
    p.add_argument("--cuts", type=int, default=50, help="power: cuts with log.durable.acks=all")
    p.add_argument("--cuts-none", type=int, default=5, help="power: cuts with log.durable.acks=none")
    p.add_argument("--cuts-tiered", type=int, default=10, help="power: cuts with log.durable.acks=all and tiering")
    p.add_argument("--power-rate", type=int, default=1000, help="power: records produced per second")
    p.add_argument("--damage-rounds", type=int, default=40)
    p.add_argument("--remote-seconds", type=float, default=120.0, help="remote: fault phase of each scenario")
    p.add_argument("--restore-rounds", type=int, default=20,
                   help="remote: rounds of partitions wiped and restored from the remote tier")
    p.add_argument("--delete-rounds", type=int, default=10, help="remote: rounds of failing seed 002 deletes")
    p.add_argument("--fuzz-inputs", type=int, default=100_000)
    p.add_argument("--connections", type=int, default=2000)
    p.add_argument("--handshake-attempts", type=int, default=20_000, help="handshake: hostile TLS/SASL connections")
    p.add_argument("--load-connections", type=int, default=1000)
    p.add_argument("--load-partitions", type=int, default=10_000)
    p.add_argument("--txn-kills", type=int, default=40, help="txn: SIGKILL rounds (broker, application or both)")
    p.add_argument("--txn-inputs", type=int, default=30_000, help="txn: input records")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "reliability.md")
    p.add_argument("--json", action="store_true", help="also print each section as JSON")
    args = p.parse_args()
    available = _load_sections()
    order = list(available)
    chosen = [s for s in args.only.split(",") if s] or order
    unknown = set(chosen) - set(order)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; known: {', '.join(order)}")
    command = command_line()
    print(f"command: {command}", flush=True)
    done: list[Section] = []
    with tempfile.TemporaryDirectory(prefix="tierlog-chaos-") as tmp:
        for name in chosen:
            t0 = time.monotonic()
            print(f"== {name}", flush=True)
            section = available[name](args, Path(tmp))
            print(section.body, flush=True)
            print(f"{name}: {'ok' if section.ok else 'FAILED'} in {time.monotonic() - t0:.0f} s", flush=True)
            if args.json:
                print(json.dumps({"section": name, "ok": section.ok, "body": section.body}), flush=True)
            done.append(section)
    write_doc(args.out, done, command, order)
    print(f"wrote {args.out}")
    return 0 if all(s.ok for s in done) else 1


if __name__ == "__main__":
    sys.exit(main())
