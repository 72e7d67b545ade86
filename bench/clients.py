"""librdkafka producer and consumer throughput against ``tierlog serve``, next to a loopback socket
copy of the same bytes in the same run.

Targets (issue 6), 100-byte records on the 2-core machine: ≥ 1,000,000 records/s produced and
≥ 1,500,000 records/s consumed (Kafka's published single-producer / single-consumer figures are
about 821,000 and 940,000 records/s). Issue 22's: 1 KiB records ≥ 800 MB/s produced (kcat and
confluent-kafka) and ≥ 1 GB/s consumed; 100 B records ≥ 2.0 M/s produced with kcat, ≥ 2.5 M/s
consumed; the Java-shaped case ≥ 300 MB/s; broker CPU ≤ 0.6 core-seconds per GB produced and ≤ 0.3
consumed -- printed for every case.

    python bench/clients.py [--records 2000000] [--sizes 100,1024] [--partitions 1] [--data-dir DIR]
                            [--security plaintext,ssl,sasl_ssl]
    python bench/clients.py --only-java-shaped [--java-shaped-mib 200] [--java-shaped-clients java,sticky]
                            [--broker-override log.durable.acks=none]

The Java-shaped case (:func:`java_shaped`): 4 producers of 1 KiB records with Java's producer
defaults over 100 partitions, by Kafka's own kafka-producer-perf-test (``java``: the only client here
that puts many partitions into one produce request), by librdkafka with its own partitioner
(``sticky``) or with the partition chosen per record (``round-robin``); each run prints the batches,
produce requests and group-commit syncs the broker saw.

Issue 19's target: over TLS (SSL) and over SASL_SSL with SCRAM-SHA-512, produce and consume
>= 0.6x the plaintext figure of the same run, for 100 B and 1 KiB records. The broker has one
listener of each kind (a test CA and certificates made at start, as tests/security does); each
secured figure is printed beside the plaintext one and the ratio.

* produce: confluent-kafka (librdkafka) ``produce_batch``, acks=1, no compression, 1 MB batches;
  timed from the first record handed to the client until ``flush`` returns (every record acknowledged).
* consume: confluent-kafka ``Consumer.consume`` from offset 0, timed from the first record received
  to the last; and, when ``kcat`` is on PATH, kcat (librdkafka's C tool) reading everything,
  timed as a whole process.
* baseline: the same number of bytes (records × record size) through a loopback TCP socket between
  two threads of one Python process, in 1 MiB writes.

The broker runs as its own process; the clients and the broker share the machine's two cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from _common import command_line, report

ROOT = Path(__file__).resolve().parents[1]
SCRAM_USER, SCRAM_PASSWORD = "bench", "bench-secret"

CHUNK = 10_000
CONSUMER_TUNING = {
    "queued.min.messages": 1_000_000, "queued.max.messages.kbytes": 1_000_000, "fetch.queue.backoff.ms": 10,
    "max.partition.fetch.bytes": 4_000_000, "fetch.max.bytes": 16_000_000,
}


def start_broker(data_dir: Path, overrides: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], list[str]]:
    """The broker and the address of each of its listeners, in the order of ``listeners``."""
    overrides = {"listeners": "PLAINTEXT://127.0.0.1:0", **(overrides or {}), "log.dirs": str(data_dir)}
    cmd = [sys.executable, "-m", "tierlog.cli.main", "--log-level", "WARNING", "serve",
           *[a for k, v in overrides.items() for a in ("--override", f"{k}={v}")]]
    wanted = len(overrides["listeners"].split(","))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    addresses: list[str] = []
    for line in proc.stdout:
        address = line.strip().rsplit(" ", 1)[1]
        # Each address once (the first listener's line has been seen twice).
        if line.startswith("tierlog listening on ") and address not in addresses:
            addresses.append(address)
            if len(addresses) == wanted:
                threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
                return proc, addresses
    raise SystemExit("the broker did not start")


def secured_listeners(directory: Path) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Broker overrides for a PLAINTEXT, an SSL and a SASL_SSL (SCRAM-SHA-512) listener with a test CA
    made now, and each listener's librdkafka settings."""
    sys.path.insert(0, str(ROOT))
    from tests.security.pki import CertificateAuthority

    ca = CertificateAuthority()
    ca_file = directory / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    _, _, broker_pem = ca.issue("localhost", server=True).write(directory, "broker")
    overrides = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                 "ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker_pem),
                 "sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    tls = {"security.protocol": "SSL", "ssl.ca.location": str(ca_file)}
    confs = {"plaintext": {}, "ssl": tls,
             "sasl_ssl": {**tls, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                          "sasl.username": SCRAM_USER, "sasl.password": SCRAM_PASSWORD}}
    return overrides, confs


def add_scram_user(bootstrap: str) -> None:
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsert = UserScramCredentialUpsertion(SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          SCRAM_PASSWORD.encode())
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(30)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(pid: int, fn: Callable[[], float], moved_bytes: int) -> tuple[float, str]:
    """``fn()``'s figure and the broker's CPU use meanwhile: in cores (of the wall time) and in
    core-seconds per GB moved -- the figure that holds on a noisy machine (issue 22's targets:
    <= 0.6 produced, <= 0.3 consumed)."""
    figure, _, text = measured_cpu(pid, fn, moved_bytes)
    return figure, text


def measured_cpu(pid: int, fn: Callable[[], float], moved_bytes: int) -> tuple[float, float, str]:
    """As :func:`measured`, with the broker's and the client's CPU together in core-s per GB."""
    cpu0, client0, wall0 = cpu_seconds(pid), client_cpu_seconds(), time.perf_counter()
    figure = fn()
    cpu, wall = cpu_seconds(pid) - cpu0, time.perf_counter() - wall0
    client = client_cpu_seconds() - client0
    gb = moved_bytes / 1e9
    return figure, (cpu + client) / gb, (f"(broker CPU {cpu / wall:.2f} cores, {cpu / gb:.2f} core-s/GB; "
                                         f"client CPU {client / gb:.2f} core-s/GB)")


def client_cpu_seconds() -> float:
    """This process's CPU time (librdkafka's threads) and that of its finished children (kcat): with
    the broker's, where a secured case's extra time goes -- the client encrypts and decrypts too."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def mb_per_s(records_per_s: float, size: int) -> str:
    return f"{records_per_s * size / 1e6:,.0f} MB/s of values"


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # always the plaintext listener
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)


def produce(bootstrap: str, topic: str, records: int, size: int, partitions: int,
            security: dict[str, str] | None = None) -> float:
    producer = Producer({
        **(security or {}), "bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 20, "batch.size": 1_000_000,
        "batch.num.messages": 1_000_000, "queue.buffering.max.messages": 10_000_000,
        "queue.buffering.max.kbytes": 4_000_000, "compression.type": "none",
    })
    producer.list_topics(topic, timeout=10)  # connect before the clock starts
    chunk = [{"value": os.urandom(size)} for _ in range(CHUNK)]
    failed = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    start = time.perf_counter()
    sent = 0
    while sent < records:
        for partition in range(partitions):
            n = min(CHUNK, records - sent)
            if n <= 0:
                break
            producer.produce_batch(topic, chunk[:n], partition=partition, on_delivery=on_delivery)
            sent += n
        producer.poll(0)
    left = producer.flush(300)
    elapsed = time.perf_counter() - start
    if left or failed:
        raise SystemExit(f"{left} records not delivered, {failed} failed")
    return records / elapsed


def warm_group_coordinator(bootstrap: str, topic: str) -> None:
    """Have the broker create __consumer_offsets before a consume is measured: the first consumer
    with a group id makes it (50 partitions: their files and fsyncs), and until 2026-11-27 that
    was counted in the confluent-kafka consume case's broker CPU (~0.2 core-s/GB of 1 KiB records)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-warm-up", "enable.auto.commit": False})
    try:
        consumer.committed([TopicPartition(topic, 0)], timeout=60)
    finally:
        consumer.close()


def consume(bootstrap: str, topic: str, records: int, partitions: int, security: dict[str, str] | None = None) -> float:
    consumer = Consumer({
        **(security or {}), "bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", "enable.auto.commit": False,
        # Let librdkafka keep fetching while Python drains its queue, and not back off for a whole
        # second (fetch.queue.backoff.ms) whenever that queue is full.
        **CONSUMER_TUNING,
        **({"debug": os.environ["RDKAFKA_DEBUG"]} if os.environ.get("RDKAFKA_DEBUG") else {}),
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    start = 0.0
    deadline = time.monotonic() + 300
    while got < records and time.monotonic() < deadline:
        msgs = consumer.consume(num_messages=CHUNK, timeout=1.0)
        if msgs and not start:
            start = time.perf_counter()  # the clock starts with the first records
        got += len(msgs)
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < records:
        raise SystemExit(f"consumed only {got} of {records}")
    return got / elapsed


def _x(security: dict[str, str] | None) -> list[str]:
    return [arg for k, v in (security or {}).items() for arg in ("-X", f"{k}={v}")]


def produce_kcat(bootstrap: str, topic: str, records: int, size: int, scratch: Path,
                 security: dict[str, str] | None = None) -> float:
    """kcat producing ``records`` lines of ``size`` bytes from a file (librdkafka without Python)."""
    kcat = shutil.which("kcat")
    assert kcat is not None
    lines = scratch / f"records-{size}.txt"
    line = os.urandom(size // 2 + 1).hex()[:size].encode() + b"\n"
    with open(lines, "wb") as f:
        for first in range(0, records, CHUNK):
            f.write(line * min(CHUNK, records - first))
    start = time.perf_counter()
    subprocess.run([kcat, "-P", "-b", bootstrap, "-t", topic, "-l", *_x(security), "-X", "acks=1", "-X", "linger.ms=20",
                    "-X", "batch.size=1000000", "-X", "batch.num.messages=1000000",
                    "-X", "queue.buffering.max.messages=10000000", "-X", "queue.buffering.max.kbytes=4000000",
                    str(lines)], check=True, capture_output=True, timeout=300)
    elapsed = time.perf_counter() - start
    lines.unlink()
    return records / elapsed


def consume_kcat(bootstrap: str, topic: str, records: int, security: dict[str, str] | None = None) -> float:
    kcat = shutil.which("kcat")
    assert kcat is not None
    start = time.perf_counter()
    out = subprocess.run([kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "\n",
                          *_x(security),
                          # kcat's librdkafka (2.0 in Debian) predates fetch.queue.backoff.ms.
                          *[arg for k, v in CONSUMER_TUNING.items() if k != "fetch.queue.backoff.ms"
                            for arg in ("-X", f"{k}={v}")]],
                         capture_output=True, check=True, timeout=300)
    elapsed = time.perf_counter() - start
    lines = out.stdout.count(b"\n")
    if lines != records:
        raise SystemExit(f"kcat read {lines} of {records}")
    return records / elapsed


#: Java's producer defaults (ProducerConfig, Kafka 4): batch.size 16384, linger.ms 5 (0 before Kafka
#: 4.0), acks=all, enable.idempotence=true, max.in.flight.requests.per.connection 5; keyless records
#: go to a sticky partition until about batch.size bytes went to it (BuiltInPartitioner, KIP-794).
JAVA_PRODUCER_DEFAULTS = {"batch.size": "16384", "linger.ms": "5", "acks": "all", "enable.idempotence": "true",
                          "max.in.flight.requests.per.connection": "5"}
#: The Java-shaped case's clients. ``sticky``: librdkafka with Java's defaults and no partition given, so
#: its partitioner places the keyless records (sticky for ``sticky.partitioning.linger.ms``, 2 x linger.ms:
#: a partition gets ~10 ms of a producer's records, cut into 16 KiB batches). ``round-robin``: the
#: same with the partition chosen per record by the bench, (first + i) % partitions -- what this case
#: ran until 2026-11-27: over 100 partitions each 5 ms linger collects ~1 record per partition, so
#: the broker gets 1 KiB batches, not Java's 16 KiB. ``java``: Apache Kafka's kafka-producer-perf-test
#: (the Java client itself, one JVM per producer).
JAVA_SHAPED_CLIENTS = ("sticky", "round-robin", "java")


def _java_shaped_producer(bootstrap: str, topic: str, records: int, partitions: int, first: int,
                          round_robin: bool) -> None:
    """One librdkafka Java-shaped producer (a process of its own: librdkafka's threads, one Python each)."""
    producer = Producer({"bootstrap.servers": bootstrap, **JAVA_PRODUCER_DEFAULTS, "compression.type": "none",
                         "sticky.partitioning.linger.ms": 10, "queue.buffering.max.kbytes": 1_000_000})
    producer.list_topics(topic, timeout=10)
    value = os.urandom(1024)
    failed = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    produce = producer.produce
    for i in range(records):
        while True:
            try:
                if round_robin:
                    produce(topic, value, partition=(first + i) % partitions, on_delivery=on_delivery)
                else:
                    produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(300) or failed:
        raise SystemExit(f"a Java-shaped producer lost {failed} records")


def _run_librdkafka_producers(bootstrap: str, topic: str, per_producer: int, producers: int, partitions: int,
                              round_robin: bool) -> float:
    """Seconds from starting the producer processes until the last has every record acknowledged."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_java_shaped_producer,
                         args=(bootstrap, topic, per_producer, partitions, i, round_robin))
             for i in range(producers)]
    start = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
        if p.exitcode != 0:
            raise SystemExit(f"a Java-shaped producer exited {p.exitcode}")
    return time.perf_counter() - start


def _run_java_producers(bootstrap: str, topic: str, per_producer: int, producers: int, size: int) -> tuple[float, float]:
    """Seconds until the last of ``producers`` kafka-producer-perf-test processes ended (JVM start
    included), and the sum of the rates the tools printed (each timed from its own first send), MB/s."""
    from _common import perf_producer_command, perf_producer_rate

    props = {"batch.size": "16384", "linger.ms": "5", "acks": "all", "compression.type": "none"}
    # The test tools' JVM flags (serial GC, first JIT tier): with the JVM's default JIT the four
    # clients spent ~1.8x the CPU compiling on these two cores in a run of 200 MiB.
    cmd = perf_producer_command(bootstrap, topic, per_producer, size, props)
    start = time.perf_counter()
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(producers)]
    outs = [p.communicate(timeout=900) for p in procs]
    elapsed = time.perf_counter() - start
    for p, (out, err) in zip(procs, outs, strict=True):
        if p.returncode:
            raise SystemExit(f"kafka-producer-perf-test exited {p.returncode}:\n{out[-2000:]}\n{err[-2000:]}")
    return elapsed, sum(perf_producer_rate(out) for out, _ in outs) * size / 1e6


def scrape(url: str) -> dict[str, float]:
    """The broker's Prometheus metrics, each sample by its name and labels as printed."""
    import urllib.request

    out: dict[str, float] = {}
    with urllib.request.urlopen(url, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
    return out


def produce_requests(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if k.startswith("tierlog_requests_total{") and 'api="Produce"' in k)


def fdatasyncs(metrics: dict[str, float]) -> float:
    """Segment files synced by group commit (an fdatasync each, or several by one syncfs)."""
    return sum(v for k, v in metrics.items() if k.startswith("tierlog_group_commit_fdatasyncs_total"))


def syncfs_calls(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if k.startswith("tierlog_group_commit_syncfs_total"))


def cpu_split(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def log_batches(data_dir: Path, topic: str) -> tuple[int, int]:
    """Record batches and their bytes in every segment of ``topic``'s partitions: the batches the
    producers sent, as the broker appended them (uncompressed v2 batches are stored as sent)."""
    batches = total = 0
    for segment in data_dir.glob(f"{topic}-[0-9]*/*.log"):
        data = segment.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            length = int.from_bytes(data[pos + 8:pos + 12], "big")
            if length == 0:
                break  # preallocated tail
            batches += 1
            total += 12 + length
            pos += 12 + length
    return batches, total


def java_shaped(pid: int, bootstrap: str, data_dir: Path, metrics_url: str, args: argparse.Namespace) -> None:
    """Issue 22's Java-client-shaped traffic: 4 producers of 1 KiB records with Java's defaults
    (batch.size 16 KiB, linger.ms 5, acks=all) over 100 partitions, by each client of
    ``--java-shaped-clients``; target >= 300 MB/s. Each figure with the batches the broker got."""
    producers, partitions, size = 4, 100, 1024
    per_producer = (args.java_shaped_mib << 20) // size // producers
    moved = per_producer * producers * size
    print(f"-- Java-shaped: {producers} producers x {per_producer:,} records of {size} B, {partitions} partitions, "
          f"batch.size=16384, linger.ms=5, acks=all (broker overrides: {args.broker_override or 'none'})", flush=True)
    for run in range(args.runs):
        for client in [c for c in args.java_shaped_clients.split(",") if c]:
            baseline = moved / loopback_copy(moved) / 1e6
            topic = f"bench-java-shaped-{client}-{run}-{int(time.time())}"
            create_topic(bootstrap, topic, partitions)
            before = scrape(metrics_url)
            user0, sys0 = cpu_split(pid)
            tools_rate = 0.0

            def run_clients(client: str = client, topic: str = topic) -> float:
                nonlocal tools_rate
                if client == "java":
                    elapsed, tools_rate = _run_java_producers(bootstrap, topic, per_producer, producers, size)
                else:
                    elapsed = _run_librdkafka_producers(bootstrap, topic, per_producer, producers, partitions,
                                                        client == "round-robin")
                return moved / elapsed / 1e6

            rate, cpu = measured(pid, run_clients, moved)
            after = scrape(metrics_url)
            user1, sys1 = cpu_split(pid)
            requests = produce_requests(after) - produce_requests(before)
            syncs = fdatasyncs(after) - fdatasyncs(before)
            syncfs = syncfs_calls(after) - syncfs_calls(before)
            batches, batch_bytes = log_batches(data_dir, topic)
            what = {"sticky": "librdkafka, its own partitioner (sticky)", "round-robin":
                    "librdkafka, partition per record round robin", "java": "kafka-producer-perf-test (Java client)"}
            report(f"Java-shaped produce, {what[client]}, 4 processes, start included (run {run + 1})", rate, "MB/s",
                   "loopback socket copy", baseline)
            if client == "java":
                print(f"   sum of the 4 tools' own rates (each from its first send): {tools_rate:,.1f} MB/s", flush=True)
            print(f"   {cpu}; broker user/system {(user1 - user0) / (moved / 1e9):.2f}/{(sys1 - sys0) / (moved / 1e9):.2f} "
                  "core-s/GB", flush=True)
            print(f"   broker saw {requests:,.0f} produce requests, {batches:,} batches of {batch_bytes / max(batches, 1):,.0f} B "
                  f"on average ({batches / max(requests, 1):.1f} per request), {syncs:,.0f} files synced "
                  f"({batches / max(syncs, 1):.1f} batches each; {syncfs:,.0f} syncfs calls among them); "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sendfile_baseline(files: list[Path], chunk_bytes: int) -> tuple[float, float, int]:
    """The kernel's own cost of what a fetch does: ``sendfile`` of ``files`` (a partition's
    segments) in ``chunk_bytes`` pieces to a loopback socket that a client thread reads. The
    (seconds, sender-thread CPU seconds, bytes) of it; on loopback the sender's system calls also
    run the receive side's TCP processing, as the broker's do."""
    server = socket.create_server(("127.0.0.1", 0))
    received = 0

    def reader() -> None:
        nonlocal received
        conn, _ = server.accept()
        view = memoryview(bytearray(1 << 20))
        while n := conn.recv_into(view):
            received += n
        conn.close()

    thread = threading.Thread(target=reader)
    thread.start()
    sent = 0
    with socket.create_connection(server.getsockname()) as out:
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        for path in files:
            with path.open("rb") as f:
                size, position = os.fstat(f.fileno()).st_size, 0
                while position < size:
                    n = os.sendfile(out.fileno(), f.fileno(), position, min(chunk_bytes, size - position))
                    position += n
                    sent += n
        out.shutdown(socket.SHUT_WR)
        cpu = time.thread_time() - cpu0
        thread.join()
        wall = time.perf_counter() - wall0
    server.close()
    return wall, cpu, sent


def loopback_copy(total_bytes: int) -> float:
    """Seconds to push ``total_bytes`` through a loopback TCP connection in 1 MiB writes."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received = 0

    def reader() -> None:
        nonlocal received
        conn, _ = server.accept()
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while True:
            n = conn.recv_into(view)
            if not n:
                break
            received += n
        conn.close()

    thread = threading.Thread(target=reader)
    thread.start()
    block = os.urandom(1 << 20)
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sender:
        left = total_bytes
        while left > 0:
            sender.sendall(block if left >= len(block) else block[:left])
            left -= len(block)
    thread.join()
    elapsed = time.perf_counter() - start
    server.close()
    assert received == total_bytes
    return elapsed


def kernel_baseline(data_dir: Path, topic: str, moved_bytes: int) -> None:
    """The consumed case's kernel baseline: the topic's segment files sent by ``sendfile`` in pieces
    of the consumer's max.partition.fetch.bytes, the sender's CPU per GB of values as the broker's."""
    chunk = int(CONSUMER_TUNING["max.partition.fetch.bytes"])
    wall, cpu, sent = sendfile_baseline(sorted(data_dir.glob(f"{topic}-[0-9]*/*.log")), chunk)
    print(f"   kernel baseline, sendfile of the topic's segment files in {chunk:,} B calls to a loopback reader: "
          f"{sent / wall / 1e6:,.0f} MB/s, sender CPU {cpu / (moved_bytes / 1e9):.2f} core-s/GB", flush=True)


def run_size(pid: int, addresses: dict[str, str], confs: dict[str, dict[str, str]], modes: list[str], size: int,
             args: argparse.Namespace, data_dir: Path) -> None:
    """Every case for one record size over each listener kind, ``--runs`` times with the kinds
    interleaved (the load of a shared machine drifts); then each secured case's best beside the
    plaintext best, and the ratio of their CPU per GB (broker and client together: what a CPU-bound
    machine would see)."""
    records = args.records if size <= 200 else max(args.records // 4, 100_000)
    moved = records * size
    baseline = records / loopback_copy(moved)
    print(f"-- {size}-byte records: {records:,} records, {args.partitions} partition(s)", flush=True)
    kcat = shutil.which("kcat") is not None and args.partitions == 1
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for run in range(args.runs):
        for mode in modes:
            bootstrap, security = addresses[mode], confs[mode]
            topic = f"bench-{size}-{mode}-{run}-{int(time.time())}"
            create_topic(addresses["plaintext"], topic, args.partitions)
            if run == 0 and mode == modes[0]:
                warm_group_coordinator(addresses["plaintext"], topic)
            cases: list[tuple[str, Callable[[], float]]] = [
                ("librdkafka produce", partial(produce, bootstrap, topic, records, size, args.partitions, security)),
                ("librdkafka consume (confluent-kafka)", partial(consume, bootstrap, topic, records, args.partitions,
                                                                 security))]
            if kcat:
                kcat_topic = f"{topic}-kcat"
                create_topic(addresses["plaintext"], kcat_topic, 1)
                cases += [("librdkafka produce (kcat, whole process)",
                           partial(produce_kcat, bootstrap, kcat_topic, records, size, Path(tempfile.gettempdir()),
                                   security)),
                          ("librdkafka consume (kcat, whole process)", partial(consume_kcat, bootstrap, topic, records,
                                                                               security))]
            for name, fn in cases:
                rate, cpu_per_gb, cpu = measured_cpu(pid, fn, moved)
                results.setdefault((name, mode), []).append((rate, cpu_per_gb))
                if mode == "plaintext":
                    report(f"{name} (run {run + 1})", rate, "records/s", "loopback socket copy", baseline)
                else:
                    print(f"{name} over {MODE_NAMES[mode]} (run {run + 1}): {rate:,.1f} records/s", flush=True)
                print(f"   {mb_per_s(rate, size)} {cpu}", flush=True)
                if mode == "plaintext" and name == "librdkafka consume (confluent-kafka)":
                    kernel_baseline(data_dir, topic, moved)
    print(f"-- {size}-byte records, best of {args.runs} beside the plaintext best of the same run; "
          f"load average now {os.getloadavg()[0]:.1f}", flush=True)
    for (name, mode), got in results.items():
        if mode == "plaintext":
            continue
        plain = results[(name, "plaintext")]
        report(f"{name} over {MODE_NAMES[mode]}", max(r for r, _ in got), "records/s", "plaintext",
               max(r for r, _ in plain))
        plain_cpu, secured_cpu = min(c for _, c in plain), min(c for _, c in got)
        print(f"   CPU per GB, broker + client: {secured_cpu:.2f} vs plaintext {plain_cpu:.2f} core-s/GB "
              f"(CPU-bound ratio {plain_cpu / secured_cpu:.2f})", flush=True)


MODE_NAMES = {"plaintext": "PLAINTEXT", "ssl": "SSL (TLS)", "sasl_ssl": "SASL_SSL SCRAM-SHA-512"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=2_000_000, help="records of the 100-byte run; records over 200 bytes use a quarter as many")
    ap.add_argument("--sizes", default="100,1024", help="record value sizes in bytes")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--data-dir", type=Path, help="where the broker keeps its logs (default: a temp dir)")
    ap.add_argument("--runs", type=int, default=1, help="repeat every case, listener kinds interleaved; best of")
    ap.add_argument("--security", default="plaintext,ssl,sasl_ssl",
                    help="listener kinds to run the clients over (plaintext always runs: it is the baseline)")
    ap.add_argument("--java-shaped", action=argparse.BooleanOptionalAction, default=True,
                    help="also the Java-client-shaped case: 16 KiB batches, linger.ms=5, 100 partitions, 4 producers")
    ap.add_argument("--java-shaped-mib", type=int, default=400, help="MiB of 1 KiB records in that case")
    ap.add_argument("--java-shaped-clients", default="sticky,java",
                    help=f"clients of that case, comma-separated, of {', '.join(JAVA_SHAPED_CLIENTS)}")
    ap.add_argument("--only-java-shaped", action="store_true", help="run only the Java-shaped case")
    ap.add_argument("--broker-override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config for the run, e.g. log.durable.acks=none (repeatable)")
    ap.add_argument("--fetch-bytes", type=int, default=int(CONSUMER_TUNING["max.partition.fetch.bytes"]),
                    help="the consumers' max.partition.fetch.bytes (librdkafka's default: 1048576)")
    args = ap.parse_args()
    CONSUMER_TUNING["max.partition.fetch.bytes"] = args.fetch_bytes
    modes = ["plaintext", *[m for m in args.security.split(",") if m and m != "plaintext"]]
    bad_clients = set(args.java_shaped_clients.split(",")) - set(JAVA_SHAPED_CLIENTS)
    if bad_clients:
        ap.error(f"--java-shaped-clients: unknown {sorted(bad_clients)}; known: {', '.join(JAVA_SHAPED_CLIENTS)}")
    if "java" in args.java_shaped_clients.split(",") and (args.java_shaped or args.only_java_shaped):
        sys.path.insert(0, str(ROOT))
        from tests.jvm.kafka import java_missing

        missing = java_missing()
        if missing is not None:
            print(f"NOTE: the Java-shaped case runs without Kafka's Java client: {missing}", flush=True)
            args.java_shaped_clients = ",".join(c for c in args.java_shaped_clients.split(",") if c != "java")
    unknown = set(modes) - set(MODE_NAMES)
    if unknown:
        ap.error(f"--security: unknown {sorted(unknown)}; known: {', '.join(MODE_NAMES)}")
    print(f"command: {command_line()}", flush=True)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="tierlog-bench-clients-"))
    pki_dir = Path(tempfile.mkdtemp(prefix="tierlog-bench-pki-"))
    overrides, confs = secured_listeners(pki_dir)
    metrics_port = free_port()
    overrides["metrics.listener"] = f"http://127.0.0.1:{metrics_port}"
    for kv in args.broker_override:
        key, sep, value = kv.partition("=")
        if not sep:
            ap.error(f"--broker-override: {kv!r} is not KEY=VALUE")
        overrides[key] = value
    proc, listed = start_broker(data_dir, overrides)
    addresses = dict(zip(["plaintext", "ssl", "sasl_ssl"], listed, strict=True))
    try:
        add_scram_user(addresses["plaintext"])
        for size in (int(s) for s in args.sizes.split(",")) if not args.only_java_shaped else ():
            run_size(proc.pid, addresses, confs, modes, size, args, data_dir)
        if args.java_shaped or args.only_java_shaped:
            java_shaped(proc.pid, addresses["plaintext"], data_dir, f"http://127.0.0.1:{metrics_port}/metrics", args)
    finally:
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(pki_dir, ignore_errors=True)
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
