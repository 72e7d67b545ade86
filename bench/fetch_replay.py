"""The broker's CPU per Fetch request as librdkafka sends them, without librdkafka's own CPU in the way.

A raw client produces ``--mib`` MiB of 1 KiB records in 1 MiB batches, walks the log once with
Fetch requests of ``--fetch-bytes`` (to learn each request's fetch offset), then replays those
requests one at a time (send, read the whole response, send the next) ``--fetches`` times: the
shape of a consumer that keeps up. confluent-kafka asks Fetch v16 by topic id (a flexible version:
tagged fields follow each record set), kcat's older librdkafka v11; both ask read_committed unless
told otherwise (``--isolation``). Printed: the broker's user and system CPU per fetch and per GB
(``/proc/PID/stat``), the client's own CPU per fetch, and the load average.

On this 2-core machine the kernel's share of a fetch depends on where the scheduler puts the
client and the broker: on the same core (the client woken on the waker's core) a 1 MiB fetch
cost ~300 µs of system time, on different cores ~120 µs, and a run of the same build lands in
either mode. ``--pin same`` / ``--pin different`` fix it (``taskset``) so that builds can be
compared within one mode.

    .venv/bin/python bench/fetch_replay.py --version 16 --fetches 3000 --pin same
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import command_line
from clients import create_topic, start_broker
from hotpath import read_frame
from tierlog.protocol import ApiKey, build_request, encode_request, parse_response
from tierlog.records import SimpleRecord, build_batch

_HEAD = struct.Struct(">qi")  # base offset, batch length
_I32 = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23


def user_system_seconds(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def fetch_frame(version: int, topic_id: Any, offset: int, fetch_bytes: int, isolation: int, corr: int) -> bytes:
    partition = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": fetch_bytes, "log_start_offset": -1,
                 "current_leader_epoch": -1}
    topic = {"topic_id": topic_id, "partitions": [partition]} if version >= 13 else {"topic": "replay",
                                                                                   "partitions": [partition]}
    values: dict[str, Any] = {"max_wait": 500, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": isolation,
                              "session_id": 0, "session_epoch": -1, "topics": [topic]}
    if version < 15:
        values["replica_id"] = -1
    return encode_request(ApiKey.FETCH, version, corr, "rdkafka", build_request(ApiKey.FETCH, version, values))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", type=int, default=16, help="Fetch version (16: confluent-kafka, 11: kcat)")
    ap.add_argument("--fetches", type=int, default=3000)
    ap.add_argument("--mib", type=int, default=64, help="MiB produced, then fetched over and over")
    ap.add_argument("--fetch-bytes", type=int, default=1 << 20, help="partition_max_bytes (librdkafka: 1 MiB)")
    ap.add_argument("--isolation", type=int, default=0, help="1: read_committed (librdkafka's default)")
    ap.add_argument("--pin", choices=("none", "same", "different"), default="none",
                    help="client and broker on core 0, or the broker on core 1")
    args = ap.parse_args()
    if args.pin != "none":
        os.sched_setaffinity(0, {0})  # the broker started below inherits it
    print(f"command: {command_line()}", flush=True)
    data_dir = Path(tempfile.mkdtemp(prefix="tierlog-bench-replay-"))
    proc, [address] = start_broker(data_dir)
    try:
        if args.pin == "different":
            subprocess.run(["taskset", "-a", "-p", "-c", "1", str(proc.pid)], check=True, capture_output=True)
        create_topic(address, "replay", 1)
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        batch = build_batch([SimpleRecord(None, os.urandom(1024), timestamp=int(time.time() * 1000))
                             for _ in range(1000)])
        produce = encode_request(ApiKey.PRODUCE, 9, 1, "replay", build_request(ApiKey.PRODUCE, 9, {
            "acks": 1, "timeout": 30000, "topic_data": [{"name": "replay", "partition_data": [
                {"index": 0, "records": batch}]}]}))
        count = max(1, (args.mib << 20) // len(batch))
        for _ in range(count):
            sock.sendall(produce)
            read_frame(sock)
        metadata = build_request(ApiKey.METADATA, 12, {"topics": [{"name": "replay", "topic_id": None}],
                                                        "allow_auto_topic_creation": False,
                                                        "include_topic_authorized_operations": False})
        sock.sendall(encode_request(ApiKey.METADATA, 12, 2, "replay", metadata))
        topic_id = parse_response(ApiKey.METADATA, 12, read_frame(sock))[1].topics[0].topic_id
        offsets, offset, end = [], 0, count * 1000
        while offset < end:  # the fetch offsets a consumer would ask, from the responses
            offsets.append(offset)
            sock.sendall(fetch_frame(args.version, topic_id, offset, args.fetch_bytes, args.isolation, 3))
            records = parse_response(ApiKey.FETCH, args.version, read_frame(sock))[1].responses[0].partitions[0].records
            pos = 0
            while pos + _HEAD.size <= len(records):
                base, length = _HEAD.unpack_from(records, pos)
                if pos + 12 + length > len(records):
                    break
                offset = base + _I32.unpack_from(records, pos + _LAST_OFFSET_DELTA_AT)[0] + 1
                pos += 12 + length
        frames = [fetch_frame(args.version, topic_id, o, args.fetch_bytes, args.isolation, 10 + i)
                  for i, o in enumerate(offsets)]
        view = memoryview(bytearray(64 << 20))

        def one(frame: bytes) -> int:
            sock.sendall(frame)
            size = _I32.unpack(sock.recv(4, socket.MSG_WAITALL))[0]
            got = 0
            while got < size:
                got += sock.recv_into(view[got:size])
            return size + 4

        for frame in frames[:20]:
            one(frame)
        user0, system0 = user_system_seconds(proc.pid)
        client0, wall0 = time.process_time(), time.perf_counter()
        moved = done = 0
        while done < args.fetches:
            moved += one(frames[done % len(frames)])
            done += 1
        wall, client = time.perf_counter() - wall0, time.process_time() - client0
        user1, system1 = user_system_seconds(proc.pid)
        user, system = user1 - user0, system1 - system0
        print(f"Fetch v{args.version}, {args.fetch_bytes:,} B per partition, isolation {args.isolation}, pin "
              f"{args.pin}: {done} fetches, {moved / wall / 1e6:,.0f} MB/s; broker user {user / done * 1e6:.0f} µs "
              f"+ system {system / done * 1e6:.0f} µs per fetch, {(user + system) / (moved / 1e9):.3f} core-s/GB; "
              f"client {client / done * 1e6:.0f} µs per fetch; load average {os.getloadavg()[0]:.2f}", flush=True)
        sock.close()
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
