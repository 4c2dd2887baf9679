"""The example pipeline, unchanged, on a real Spark standalone cluster: a master and two
workers (one core each) as their own processes, `spark-submit --py-files ledgermq.zip`
in client mode, a real ledgermq broker. The driver and the executors run a Python that
has pyspark but not ledgermq, so everything ledgermq comes from the shipped zip.
Minutes of JVM start-up and scheduling: `make spark-cluster` runs it, not the default run."""
import asyncio
import json
import shutil
import subprocess

import pytest

from ..integration.load import read_all
from ..wait import wait_until
from .standalone import ROOT, StandaloneCluster, clean_python, package_zip

EVENTS = 2000
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def cluster(tmp_path):
    c = StandaloneCluster(tmp_path / "spark", workers=2, cores=1, memory="512m")
    try:
        yield c.start()
    finally:
        c.stop()


def submit(cluster, tmp_path, py, *args, py_files=True):
    """spark-submit the example from a directory of its own (so its `sys.path` holds no
    checkout); returns (exit code, its stdout, its stderr)."""
    app = tmp_path / "app"
    app.mkdir(exist_ok=True)
    script = shutil.copy(ROOT / "examples" / "spark_pipeline.py", app / "spark_pipeline.py")
    package = package_zip(tmp_path / "ledgermq.zip")
    # --py-files reach the executors and the driver's own Python, not the Python processes
    # the driver's JVM starts to find and plan data sources: those need the zip on the
    # driver's PYTHONPATH (executors do not inherit it)
    env = {**cluster.env, "PYSPARK_PYTHON": str(py), "PYSPARK_DRIVER_PYTHON": str(py),
           "PYTHONPATH": str(package)}
    cmd = [str(cluster.home / "bin" / "spark-submit"), "--master", cluster.url,
           *(["--py-files", str(package)] if py_files else []),
           "--driver-memory", "512m", "--executor-memory", "512m",
           # both executors registered before the first job: its tasks go to both
           "--conf", "spark.cores.max=2",
           "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
           "--conf", "spark.driver.host=127.0.0.1",
           "--conf", "spark.driver.bindAddress=127.0.0.1",
           str(script), *args]
    run = len(list(tmp_path.glob("spark-submit-*.out")))
    out, log = tmp_path / f"spark-submit-{run}.out", tmp_path / f"spark-submit-{run}.log"
    with out.open("wb") as stdout, log.open("wb") as stderr:
        done = subprocess.run(cmd, env=env, cwd=app, stdout=stdout, stderr=stderr, timeout=480)
    return done.returncode, out.read_text(errors="replace"), log.read_text(errors="replace")


def test_the_example_pipeline_runs_on_a_standalone_cluster(cluster, broker, tmp_path):
    py = clean_python(tmp_path / "py")
    no_ledgermq = subprocess.run([str(py), "-c", "import pyspark, pyarrow, ledgermq"],
                                 cwd=tmp_path, env=cluster.env, capture_output=True, text=True)
    assert "No module named 'ledgermq'" in no_ledgermq.stderr  # only the zip brings it

    code, stdout, stderr = submit(cluster, tmp_path, py, "--namesrv", broker.namesrv,
                                  "--events", str(EVENTS), "--work", str(tmp_path / "work"))
    assert code == 0, f"spark-submit failed:\n{stdout[-6000:]}\n{stderr[-3000:]}"
    out = json.loads(stdout.strip().splitlines()[-1])

    # every event counted once; each window written once to the topic and to Parquet
    assert out["events_counted"] == EVENTS
    assert out["windows_in_parquet"] == out["windows_in_topic"] > 0
    stored = asyncio.run(read_all(broker.namesrv, topic="EventStats"))
    windows = [json.loads(b) for q in stored.values() for b in q]
    assert len(windows) == out["windows_in_topic"]
    assert len({(w["window_start"], w["action"]) for w in windows}) == len(windows)
    assert sum(w["events"] for w in windows) == EVENTS

    # the work ran on the workers' executors, one per worker, not in the driver
    apps = wait_until(lambda: [a for a in cluster.state()["completedapps"]
                               if a["name"] == "ledgermq-pipeline"],
                      "the application listed as completed by the master", timeout=30)
    assert len(apps) == 1
    app_id = apps[0]["id"]
    for i in range(cluster.workers):
        executors = list((cluster.worker_dir(i) / app_id).glob("*/stderr"))
        assert len(executors) == 1, f"worker {i}: executors {executors}"
        tasks = executors[0].read_text(errors="replace").count("Running task")
        assert tasks > 0, f"worker {i}'s executor ran no task"

    # the executors have ledgermq from --py-files alone: the same query, submitted without
    # them (reading the same events from a fresh checkpoint), fails on the executors
    code, stdout, stderr = submit(cluster, tmp_path, py, "--namesrv", broker.namesrv,
                                  "--no-produce", "--work", str(tmp_path / "work-2"),
                                  py_files=False)
    assert code != 0
    assert "No module named 'ledgermq'" in stdout + stderr
