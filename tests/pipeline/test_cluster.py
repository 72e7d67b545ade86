"""The Spark pipeline on a real standalone cluster whose worker cannot see the broker's disk.

A master and one worker are started from pyspark's bundled ``spark-class``; the worker runs in a
private mount namespace (``unshare -m``) with a tmpfs over the broker's data dir, so its executors
see neither the segments nor ``remote-log-metadata/``. The remote tier is S3 (moto on loopback),
written by a real ``tierlog serve``. A driver without the path plans the remote part from the
manifests in the bucket, reads it from S3 on the executor, and the rest through the broker: the rows
equal a Kafka consumer's, read as a batch and as a stream (``tail=broker``). The same read with ``tail=local`` fails on the executor (the namespace
works), and every ``tierlog spark`` job against the cluster gives what it gives on ``local[*]``
(the tasks that read the log dir run on the driver, beside the broker; ``export`` reads the tail
through the broker). Every job runs through the CLI's entry point in one driver process per master
(``cluster_driver.py``), whose session is started once for the module.
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.ports import free_port
from tests.helpers.waits import wait_until
from tests.pipeline.cluster_driver import ANSWER
from tests.pipeline.test_tail import TOPIC, tiered_broker  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.spark]
REPO = Path(__file__).resolve().parents[2]

def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _unshare_refusal() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


class _Cluster:
    def __init__(self, work: Path, hidden: list[Path]) -> None:
        self.work = work
        self.master_port = free_port()
        self.url = f"spark://127.0.0.1:{self.master_port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs = {"master": work / "master.log", "worker": work / "worker.log"}
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        cls = str(_spark_class())
        self._start("master", [cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.master_port), "--webui-port", str(free_port())], env)
        assert wait_until(lambda: "I have been elected leader" in self.log("master"), 120), self.log("master")
        (work / "worker").mkdir()
        # The worker's own view of the filesystem: tmpfs over each hidden dir, in its namespace only.
        mounts = " && ".join(f"mount -t tmpfs tierlog-hidden {d}" for d in hidden)
        worker = [cls, "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--cores", "1",
                  "--memory", "1g", "--work-dir", str(work / "worker"), "--webui-port", str(free_port())]
        self._start("worker", ["unshare", "-m", "sh", "-c", f"{mounts} && exec \"$@\"", "sh", *worker], env)
        assert wait_until(lambda: "Successfully registered with master" in self.log("worker"), 120), self.log("worker")

    def _start(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        with open(self.logs[name], "wb") as out:
            self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True))

    def log(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped broker's data dir (the pipeline tests' data set), hidden from the worker too."""
    from tests.pipeline.data import build_dataset

    root = tmp_path_factory.mktemp("stopped")
    build_dataset(root)
    return root


@pytest.fixture(scope="module")
def cluster(tiered_broker: dict[str, Any], stopped: Path,  # noqa: F811
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Cluster]:
    refused = _unshare_refusal()
    if refused is not None:
        pytest.skip(f"the cluster test needs a private mount namespace for the Spark worker, and `unshare -m` "
                    f"is not permitted here: {refused}")
    c = _Cluster(tmp_path_factory.mktemp("cluster"), [tiered_broker["data"], stopped])
    yield c
    c.stop()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # credentials only in the options


class _Driver:
    """One Spark driver process on one master (tests/pipeline/cluster_driver.py), kept for the module:
    each job runs in its session instead of paying a driver JVM (and on the cluster an executor JVM) of
    its own."""

    def __init__(self, master: str, log: Path) -> None:
        self.master = master
        self.log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.pipeline.cluster_driver", master], cwd=REPO,
                                         env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         text=True, bufsize=1, start_new_session=True)
        self._answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(ANSWER):
                self._answers.put(line[len(ANSWER):])
        self._answers.put(None)

    def ask(self, request: dict[str, Any], timeout_s: float = 600) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        try:
            line = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no answer from the driver on {self.master} in {timeout_s} s to {request}:\n"
                                 f"{self.log.read_text(errors='replace')[-3000:]}") from None
        assert line is not None, f"the driver on {self.master} exited:\n{self.log.read_text(errors='replace')[-3000:]}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def drivers(cluster: _Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, _Driver]]:
    """A driver on local[2] and one on the cluster (each job's answer on one is compared with the other's)."""
    logs = tmp_path_factory.mktemp("drivers")
    started = {m: _Driver(m, logs / f"driver-{i}.log") for i, m in enumerate(("local[2]", cluster.url))}
    yield started
    for d in started.values():
        d.stop()


def _job(driver: _Driver, *args: str) -> list[str]:
    """``tierlog spark ...`` on the driver's master, its --json lines."""
    run = driver.ask({"cli": ["spark", *args, "--master", driver.master, "--json", "--conf", "spark.cores.max=1"]})
    assert run["rc"] == 0, f"{args[0]} on {driver.master}: {run['stderr'][-3000:]}"
    lines: list[str] = run["stdout"].splitlines()
    return lines


def test_a_cluster_whose_worker_cannot_see_the_broker_reads_the_topic_whole(
        cluster: _Cluster, drivers: dict[str, _Driver], tiered_broker: dict[str, Any],  # noqa: F811
        tmp_path: Path) -> None:
    broker, data = tiered_broker["broker"], tiered_broker["data"]
    remote = tiered_broker["remote"]
    options = {
        # No path: the driver plans from the bucket's manifests and the broker.
        "broker": {**remote, "subscribe": TOPIC, "includeHeaders": "true", "kafka.bootstrap.servers": broker.bootstrap},
        "local": {**remote, "subscribe": TOPIC, "path": str(data), "tail": "local"},
    }
    out = tmp_path / "result.pickle"
    done = drivers[cluster.url].ask({"read": options, "out": str(out)})
    assert done["rc"] == 0, f"{done['stderr'][-4000:]}\nworker:\n{cluster.log('worker')[-3000:]}"
    with open(out, "rb") as f:
        result = pickle.load(f)
    assert result["rows"] == tiered_broker["consumed"]
    assert result["stream"] == tiered_broker["consumed"] and result["stream_batches"] >= 3
    # The executor really is blind to the data dir: the same read of local segments fails there.
    assert "No such file or directory" in result["local"] and str(data) in result["local"], result["local"][-2000:]

    # `tierlog spark usage` and `verify` on the cluster say what they say on local[*].
    plugin = [f"--remote={k}={v}" for k, v in remote.items()]
    for job in ("usage", "verify"):
        got = {master: sorted(_job(drivers[master], job, "--path", str(data), *plugin))
               for master in ("local[2]", cluster.url)}
        assert got[cluster.url] == got["local[2]"] and got["local[2]"], job


def test_the_jobs_that_read_the_log_dir_give_on_the_cluster_what_they_give_on_local(
        cluster: _Cluster, drivers: dict[str, _Driver], tiered_broker: dict[str, Any],  # noqa: F811
        stopped: Path, tmp_path: Path) -> None:
    """``retention-preview``, ``rebuild-snapshots`` and ``export`` with a worker that cannot see the
    log dir: the same rows (and the same snapshot bytes, the same Parquet rows) as on local[2]."""
    import pyarrow.parquet as pq

    from tierlog.storage.checkpoints import CLEAN_SHUTDOWN

    broker, data = tiered_broker["broker"], tiered_broker["data"]
    plugin = [f"--remote={k}={v}" for k, v in tiered_broker["remote"].items()]
    masters = ("local[2]", cluster.url)

    # retention-preview over both tiers (S3 for the remote one), at a fixed time, with a retention
    # that deletes all but the newest data.
    now = tiered_broker["n"] + 1_700_000_000_000 + 86_400_000
    preview = {m: sorted(_job(drivers[m], "retention-preview", "--path", str(data), *plugin, "--now", str(now),
                              "--override", "retention.ms=86400000")) for m in masters}
    assert preview[cluster.url] == preview["local[2]"]
    tiers = {json.loads(line)["tier"] for line in preview["local[2]"]}
    assert "remote" in tiers, preview["local[2]"]

    # rebuild-snapshots on two copies of a stopped broker's partition: the same snapshots, written by
    # the driver into the partition directory (the worker cannot even see it).
    written: dict[str, dict[str, bytes]] = {}
    for i, master in enumerate(masters):
        copy = stopped / f"copy-{i}"
        shutil.copytree(stopped / "data" / "orders-0", copy / "orders-0")
        (copy / CLEAN_SHUTDOWN).write_bytes(b"")
        removed = sorted(p.name for p in (copy / "orders-0").glob("*.snapshot"))
        for name in removed:
            (copy / "orders-0" / name).unlink()
        rows = [json.loads(line) for line in _job(drivers[master], "rebuild-snapshots", "--path", str(copy))]
        assert rows and all(r["written"] for r in rows), rows
        written[master] = {p.name: p.read_bytes() for p in (copy / "orders-0").glob("*.snapshot")}
        assert set(written[master]) == {r["snapshot"] for r in rows} and set(written[master]) <= set(removed)
    assert written[cluster.url] == written["local[2]"]

    # export: on the cluster the offsets not in S3 come through the broker (--bootstrap-server).
    exported = {}
    for master in masters:
        out = tmp_path / f"export-{masters.index(master)}"  # no "[": Hadoop globs read paths
        extra = ["--bootstrap-server", broker.bootstrap] if master == cluster.url else []
        lines = _job(drivers[master], "export", "--path", str(data), *plugin, "--topic", TOPIC, "--output", str(out), *extra)
        assert json.loads(lines[0])["rows"] == len(tiered_broker["consumed"])
        table = pq.read_table(out, columns=["key", "value", "topic", "partition", "offset", "timestamp"])
        exported[master] = sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True),
                                  key=lambda r: (r[3], r[4]))
    assert exported[cluster.url] == exported["local[2]"]
    assert [(r[3], r[4]) for r in exported["local[2]"]] == [(r[3], r[4]) for r in tiered_broker["consumed"]]
