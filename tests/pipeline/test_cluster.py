"""The Spark pipeline on a real standalone cluster whose worker cannot see the broker's disk.

A master and one worker are started from pyspark's bundled ``spark-class``; the worker runs in a
private mount namespace (``unshare -m``) with a tmpfs over the broker's data dir, so its executors
see neither the segments nor ``remote-log-metadata/``. The remote tier is S3 (moto on loopback),
written by a real ``tierlog serve``. A driver without the path plans the remote part from the
manifests in the bucket, reads it from S3 on the executor, and the rest through the broker: the rows
equal a Kafka consumer's, read as a batch and as a stream (``tail=broker``). The same read with ``tail=local`` fails on the executor (the namespace
works), and every ``tierlog spark`` job against the cluster gives what it gives on ``local[*]``
(the tasks that read the log dir run on the driver, beside the broker; ``export`` reads the tail
through the broker).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.ports import free_port
from tests.helpers.waits import wait_until
from tests.pipeline.test_tail import TOPIC, tiered_broker  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.spark]
REPO = Path(__file__).resolve().parents[2]

_DRIVER = r"""
import json, pickle, sys
from tierlog.pipeline import spark_session
from tests.helpers.pipeline import rows
master, out, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
spark = spark_session(master, app_name="tierlog-cluster-test", conf={
    "spark.ui.enabled": "false", "spark.cores.max": "1", "spark.executor.memory": "512m",
    "spark.sql.session.timeZone": "UTC"})
result = {}
try:
    result["rows"] = rows(spark.read.format("tierlog").options(**options["broker"]).load())
    # The same as a stream: history from S3 on the executor, the rest through the broker.
    query = (spark.readStream.format("tierlog").options(**options["broker"]).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "1000").load()
             .writeStream.format("memory").queryName("streamed").trigger(availableNow=True).start())
    query.awaitTermination(600)
    result["stream_batches"] = len(query.recentProgress)
    result["stream"] = rows(spark.table("streamed"))
    try:
        spark.read.format("tierlog").options(**options["local"]).load().count()
        result["local"] = "no error"
    except Exception as e:
        result["local"] = str(e)
finally:
    spark.stop()
with open(out, "wb") as f:
    pickle.dump(result, f)
"""


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


def _job(master: str, *args: str) -> list[str]:
    """``tierlog spark ...`` on ``master``, its --json lines."""
    run = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "spark", *args, "--master", master, "--json",
                          "--conf", "spark.cores.max=1"], cwd=REPO, env=_env(), capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, f"{args[0]} on {master}: {run.stderr[-3000:]}"
    return run.stdout.splitlines()


def test_a_cluster_whose_worker_cannot_see_the_broker_reads_the_topic_whole(
        cluster: _Cluster, tiered_broker: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    broker, data = tiered_broker["broker"], tiered_broker["data"]
    remote = tiered_broker["remote"]
    options = {
        # No path: the driver plans from the bucket's manifests and the broker.
        "broker": {**remote, "subscribe": TOPIC, "includeHeaders": "true", "kafka.bootstrap.servers": broker.bootstrap},
        "local": {**remote, "subscribe": TOPIC, "path": str(data), "tail": "local"},
    }
    out = tmp_path / "result.pickle"
    done = subprocess.run([sys.executable, "-c", _DRIVER, cluster.url, str(out), json.dumps(options)], cwd=REPO,
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{done.stderr[-4000:]}\nworker:\n{cluster.log('worker')[-3000:]}"
    with open(out, "rb") as f:
        result = pickle.load(f)
    assert result["rows"] == tiered_broker["consumed"]
    assert result["stream"] == tiered_broker["consumed"] and result["stream_batches"] >= 3
    # The executor really is blind to the data dir: the same read of local segments fails there.
    assert "No such file or directory" in result["local"] and str(data) in result["local"], result["local"][-2000:]

    # `tierlog spark usage` and `verify` on the cluster say what they say on local[*].
    plugin = [f"--remote={k}={v}" for k, v in remote.items()]
    for job in ("usage", "verify"):
        got = {master: sorted(_job(master, job, "--path", str(data), *plugin)) for master in ("local[2]", cluster.url)}
        assert got[cluster.url] == got["local[2]"] and got["local[2]"], job


def test_the_jobs_that_read_the_log_dir_give_on_the_cluster_what_they_give_on_local(
        cluster: _Cluster, tiered_broker: dict[str, Any], stopped: Path, tmp_path: Path) -> None:  # noqa: F811
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
    preview = {m: sorted(_job(m, "retention-preview", "--path", str(data), *plugin, "--now", str(now),
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
        rows = [json.loads(line) for line in _job(master, "rebuild-snapshots", "--path", str(copy))]
        assert rows and all(r["written"] for r in rows), rows
        written[master] = {p.name: p.read_bytes() for p in (copy / "orders-0").glob("*.snapshot")}
        assert set(written[master]) == {r["snapshot"] for r in rows} and set(written[master]) <= set(removed)
    assert written[cluster.url] == written["local[2]"]

    # export: on the cluster the offsets not in S3 come through the broker (--bootstrap-server).
    exported = {}
    for master in masters:
        out = tmp_path / f"export-{masters.index(master)}"  # no "[": Hadoop globs read paths
        extra = ["--bootstrap-server", broker.bootstrap] if master == cluster.url else []
        lines = _job(master, "export", "--path", str(data), *plugin, "--topic", TOPIC, "--output", str(out), *extra)
        assert json.loads(lines[0])["rows"] == len(tiered_broker["consumed"])
        table = pq.read_table(out, columns=["key", "value", "topic", "partition", "offset", "timestamp"])
        exported[master] = sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True),
                                  key=lambda r: (r[3], r[4]))
    assert exported[cluster.url] == exported["local[2]"]
    assert [(r[3], r[4]) for r in exported["local[2]"]] == [(r[3], r[4]) for r in tiered_broker["consumed"]]
