"""ledgermq topics as a PySpark data source (`format("ledgermq")`); install with the
`spark` extra (pyspark, pyarrow)."""
from __future__ import annotations


def register(spark) -> None:
    """Make `format("ledgermq")` available in this Spark session."""
    from .source import LedgerMQDataSource
    spark.dataSource.register(LedgerMQDataSource)


__all__ = ["register"]
