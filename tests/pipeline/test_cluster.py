"""The Spark pipeline on a real standalone cluster whose worker cannot see the broker's disk.

A master and one worker are started from pyspark's bundled ``spark-class``; the worker runs in a
private mount namespace (``unshare -m``) with a tmpfs over the broker's data dir, so its executors
see neither the segments nor ``remote-log-metadata/``. The remote tier is S3 (moto on loopback),
written by a real ``tierlog serve``. A driver without the path plans the remote part from the
manifests in the bucket, reads it from S3 on the executor, and the rest through the broker: the rows
equal a Kafka consumer's. The same read with ``tail=local`` fails on the executor (the namespace
works), and ``tierlog spark usage``/``verify`` against the cluster give what they give on
``local[*]`` (the local segments' tasks run on the driver, beside the broker).
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


@pytest.fixture
def cluster(tiered_broker: dict[str, Any], tmp_path: Path) -> Iterator[_Cluster]:  # noqa: F811
    refused = _unshare_refusal()
    if refused is not None:
        pytest.skip(f"the cluster test needs a private mount namespace for the Spark worker, and `unshare -m` "
                    f"is not permitted here: {refused}")
    c = _Cluster(tmp_path, [tiered_broker["data"]])
    yield c
    c.stop()


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
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # credentials only in the options
    done = subprocess.run([sys.executable, "-c", _DRIVER, cluster.url, str(out), json.dumps(options)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{done.stderr[-4000:]}\nworker:\n{cluster.log('worker')[-3000:]}"
    with open(out, "rb") as f:
        result = pickle.load(f)
    assert result["rows"] == tiered_broker["consumed"]
    # The executor really is blind to the data dir: the same read of local segments fails there.
    assert "No such file or directory" in result["local"] and str(data) in result["local"], result["local"][-2000:]

    # `tierlog spark usage` and `verify` on the cluster say what they say on local[*].
    plugin = [f"--remote={k}={v}" for k, v in remote.items()]
    for job in ("usage", "verify"):
        got = {}
        for master in ("local[2]", cluster.url):
            run = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "spark", job, "--path", str(data),
                                  *plugin, "--master", master, "--json", "--conf", "spark.cores.max=1"],
                                 cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
            assert run.returncode == 0, f"{job} on {master}: {run.stderr[-3000:]}"
            got[master] = sorted(run.stdout.splitlines())
        assert got[cluster.url] == got["local[2]"] and got["local[2]"], job
