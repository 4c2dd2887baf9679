"""One local[2] Spark session for every Spark test (starting one costs seconds), and a
real ledgermq to read and write."""
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    from pyspark.sql import SparkSession

    # local[2, 2]: two cores, and a failed task is tried twice (the sink's retry test)
    session = (SparkSession.builder.master("local[2, 2]").appName("ledgermq-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    # no register(): format("ledgermq") is found by name (the pyspark_ledgermq module)
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.dev_process import DevProcess
    d = DevProcess(tmp_path_factory.mktemp("spark-broker")).start()
    yield d
    d.stop()
