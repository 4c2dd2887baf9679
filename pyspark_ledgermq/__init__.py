"""Lets Spark find `format("ledgermq")` by name: PySpark registers the `DefaultSource` of
every installed top-level module whose name starts with `pyspark_`."""
from ledgermq.spark.source import LedgerMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
