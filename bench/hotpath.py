"""The broker's own cost per produce and fetch request, without a client library's CPU in the way.

A raw Kafka client in this process sends pre-encoded Produce v9 requests (one batch of ``--record``
byte records per request, ``--batch-kib`` each, acks=1) pipelined ``--inflight`` deep over one
connection to ``tierlog serve`` on loopback, then reads everything back with Fetch v11 requests of
``--fetch-mib``. Printed for each: MB/s beside a loopback TCP copy of the same bytes in the same run
(the baseline, and the ratio), the broker's CPU per GB and per request (from /proc, so it holds on
a loaded machine better than throughput does) and its page faults per request. With ``--profile
FILE`` the broker is sampled by py-spy (``--native``) meanwhile, in py-spy's raw format, which
docs/performance.md reads as "where the time goes".

Then produce latency: ``--latency-requests`` requests sent one at a time (the next once the last is
answered), with acks=1 and with acks=all, printed as p50/p99/p99.9 from send to response read.

    python bench/hotpath.py [--mib 512] [--batch-kib 1024] [--record 1024] [--inflight 5] [--profile FILE]
        [--fetch-mib 8] [--fetch-passes 1] [--latency-requests 1000]

The fetch case is followed by its kernel baseline: ``sendfile`` of the same segment files in
``--fetch-mib`` calls to a loopback socket that a client thread reads, the sender's CPU per GB
beside the broker's.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from _common import command_line, report
from clients import cpu_seconds, create_topic, loopback_copy, sendfile_baseline, start_broker
from tierlog.protocol import ApiKey, build_request, encode_request, parse_response
from tierlog.records import SimpleRecord, build_batch

_I32 = struct.Struct(">i")
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_OFFSET_DELTA_AT = 23


def minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def user_system_seconds(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK"), int(fields[12]) / os.sysconf("SC_CLK_TCK")


def read_frame(sock: socket.socket) -> bytearray:
    size = _I32.unpack(sock.recv(4, socket.MSG_WAITALL))[0]
    out = bytearray(size)
    view, got = memoryview(out), 0
    while got < size:
        got += sock.recv_into(view[got:])
    return out


def produce(sock: socket.socket, batch: bytes, count: int, inflight: int, pieces: int = 1) -> None:
    frame = produce_frame(batch, 1)
    step = -(-len(frame) // pieces)
    parts = [frame[i:i + step] for i in range(0, len(frame), step)]
    sent = answered = 0
    while answered < count:
        while sent < count and sent - answered < inflight:
            for part in parts:
                sock.sendall(part)
                if pieces > 1:
                    time.sleep(0.0002)  # as a client encoding its request while sending it
            sent += 1
        _, answer = parse_response(ApiKey.PRODUCE, 9, read_frame(sock))
        error = answer.responses[0].partition_responses[0].error_code
        if error:
            raise SystemExit(f"produce failed: error {error}")
        answered += 1


def produce_frame(batch: bytes, acks: int) -> bytes:
    body = build_request(ApiKey.PRODUCE, 9, {"acks": acks, "timeout": 30000, "topic_data": [
        {"name": "hotpath", "partition_data": [{"index": 0, "records": batch}]}]})
    return encode_request(ApiKey.PRODUCE, 9, 1, "hotpath", body)


def latencies(sock: socket.socket, batch: bytes, count: int, acks: int) -> list[float]:
    """Seconds from sending each produce request to reading its response, one request at a time
    (nothing queued in front of it: the broker's own latency plus a loopback round trip)."""
    frame = produce_frame(batch, acks)
    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        sock.sendall(frame)
        answer = read_frame(sock)
        out.append(time.perf_counter() - t0)
        error = parse_response(ApiKey.PRODUCE, 9, answer)[1].responses[0].partition_responses[0].error_code
        if error:
            raise SystemExit(f"produce failed: error {error}")
    return out


def percentile(sorted_values: list[float], p: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(p / 100 * len(sorted_values)))]


def fetch(sock: socket.socket, end_offset: int, fetch_bytes: int) -> tuple[int, int]:
    """Fetch from offset 0 to ``end_offset``; the (requests, bytes) it took."""
    offset = requests = moved = 0
    while offset < end_offset:
        body = build_request(ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": fetch_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": "hotpath", "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": fetch_bytes, "log_start_offset": -1,
                 "current_leader_epoch": -1}]}]})
        sock.sendall(encode_request(ApiKey.FETCH, 11, 2, "hotpath", body))
        frame = read_frame(sock)
        requests, moved = requests + 1, moved + len(frame)
        records = parse_response(ApiKey.FETCH, 11, frame)[1].responses[0].partitions[0].records
        pos = 0
        while pos + _BATCH_HEAD.size <= len(records):
            base, length = _BATCH_HEAD.unpack_from(records, pos)
            if pos + 12 + length > len(records):
                break  # a partial batch at the end of the response
            offset = base + _I32.unpack_from(records, pos + _LAST_OFFSET_DELTA_AT)[0] + 1
            pos += 12 + length
    return requests, moved


def fetch_passes(sock: socket.socket, end_offset: int, fetch_bytes: int, passes: int) -> tuple[int, int]:
    requests = moved = 0
    for _ in range(passes):
        r, m = fetch(sock, end_offset, fetch_bytes)
        requests, moved = requests + r, moved + m
    return requests, moved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512, help="MiB produced (then fetched)")
    ap.add_argument("--batch-kib", type=int, default=1024, help="size of each produce request's batch")
    ap.add_argument("--record", type=int, default=1024, help="record value size in bytes")
    ap.add_argument("--inflight", type=int, default=5, help="produce requests in flight")
    ap.add_argument("--pieces", type=int, default=1,
                    help="send each produce request in this many pieces, 0.2 ms apart (a client slower than the "
                         "broker, as librdkafka's producer is: the broker then reads a request in several reads)")
    ap.add_argument("--fetch-mib", type=int, default=8, help="fetch max_bytes")
    ap.add_argument("--no-fetch", action="store_true", help="measure produce only (no fetch case)")
    ap.add_argument("--fetch-passes", type=int, default=1,
                    help="read the log this many times in the fetch case (later passes: from the page cache, warm)")
    ap.add_argument("--profile", type=Path, help="sample the broker with py-spy into this file (raw format)")
    ap.add_argument("--profile-nonblocking", action="store_true",
                    help="with --profile: Python frames only, without stopping the broker for each sample (a stop "
                         "counts as a wait in the kernel, which sends inline appends to the pool for 5 s)")
    ap.add_argument("--attach", help="a command run while the cases run, the broker's pid appended (say "
                    "'strace -c -f -o FILE -p' or 'perf record -e cpu-clock:u -g -o FILE -p'); stopped by SIGINT")
    ap.add_argument("--latency-requests", type=int, default=1000,
                    help="produce requests sent one at a time for the latency percentiles, per acks setting")
    args = ap.parse_args()
    print(f"command: {command_line()}", flush=True)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    per_batch = max(1, (args.batch_kib << 10) // (args.record + 20))
    batch = build_batch([SimpleRecord(None, os.urandom(args.record), timestamp=int(time.time() * 1000))
                         for _ in range(per_batch)])
    count = max(1, (args.mib << 20) // len(batch))
    moved = count * len(batch)
    baseline = moved / loopback_copy(moved) / 1e6
    data_dir = Path(tempfile.mkdtemp(prefix="tierlog-bench-hotpath-"))
    proc, [address] = start_broker(data_dir)
    spy: subprocess.Popen[bytes] | None = None
    attached: subprocess.Popen[bytes] | None = None
    try:
        create_topic(address, "hotpath", 1)
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if args.profile:
            mode = ["--nonblocking"] if args.profile_nonblocking else ["--native"]
            spy = subprocess.Popen(["py-spy", "record", *mode, "-r", "250", "-f", "raw", "-o", str(args.profile),
                                    "-p", str(proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.5)  # attached before the clock starts
        if args.attach:
            attached = subprocess.Popen([*shlex.split(args.attach), str(proc.pid)])
            time.sleep(1.5)
        for name, run, requests_of in (
                (f"produce {count} x {len(batch):,} B, {args.inflight} in flight",
                 lambda: produce(sock, batch, count, args.inflight, args.pieces), lambda _: count),
                (f"fetch, {args.fetch_mib} MiB per request" + (f", {args.fetch_passes} passes" if args.fetch_passes > 1 else ""),
                 lambda: fetch_passes(sock, count * per_batch, args.fetch_mib << 20, args.fetch_passes),
                 lambda r: r[0])):
            if args.no_fetch and name.startswith("fetch"):
                continue
            times0 = user_system_seconds(proc.pid)
            cpu0, faults0, wall0 = cpu_seconds(proc.pid), minor_faults(proc.pid), time.perf_counter()
            result = run()
            wall = time.perf_counter() - wall0
            cpu, faults = cpu_seconds(proc.pid) - cpu0, minor_faults(proc.pid) - faults0
            user, system = (b - a for a, b in zip(times0, user_system_seconds(proc.pid), strict=True))
            requests = requests_of(result)
            passes = args.fetch_passes if name.startswith("fetch") else 1
            report(name, passes * moved / wall / 1e6, "MB/s", "loopback socket copy", baseline)
            print(f"   broker CPU {cpu / wall:.2f} cores, {cpu / (passes * moved / 1e9):.2f} core-s/GB, "
                  f"{cpu / requests * 1e6:,.0f} µs (user {user / requests * 1e6:,.0f}, system "
                  f"{system / requests * 1e6:,.0f}) and {faults / requests:.0f} page faults per request", flush=True)
            if name.startswith("fetch"):
                base_wall, base_cpu, base_bytes = sendfile_baseline(sorted((data_dir / "hotpath-0").glob("*.log")),
                                                                    args.fetch_mib << 20)
                base_gb = base_bytes / 1e9
                print(f"   kernel baseline, sendfile of the same segment files in {args.fetch_mib} MiB calls to a "
                      f"loopback reader: {base_bytes / base_wall / 1e6:,.1f} MB/s, sender CPU "
                      f"{base_cpu / base_gb:.2f} core-s/GB; broker / kernel CPU per GB "
                      f"{cpu / (passes * moved / 1e9) / (base_cpu / base_gb):.2f}", flush=True)
        for acks, label in ((1, "acks=1"), (-1, "acks=all (log.durable.acks=all: answered after the fsync)")):
            if args.latency_requests <= 0:
                break
            cpu0 = cpu_seconds(proc.pid)
            took = sorted(latencies(sock, batch, args.latency_requests, acks))
            cpu = cpu_seconds(proc.pid) - cpu0
            p50, p99, p999 = (percentile(took, p) * 1e3 for p in (50, 99, 99.9))
            print(f"produce latency, one {len(batch):,} B request at a time, {label}: p50 {p50:.2f} ms, "
                  f"p99 {p99:.2f} ms, p99.9 {p999:.2f} ms ({len(took)} requests; broker CPU "
                  f"{cpu / len(took) * 1e6:,.0f} µs per request)", flush=True)
        sock.close()
    finally:
        if attached is not None:
            attached.send_signal(2)
            attached.wait(60)
        if spy is not None:
            spy.send_signal(2)
            spy.wait(60)
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
