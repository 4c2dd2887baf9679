"""Prometheus metrics over HTTP for any of ledgermq's servers: a small asyncio handler on
the server's own event loop (collectors read the server's state between its other work,
never from another thread), and the family helpers the collectors share."""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from .histogram import Histogram

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def gauge(name: str, doc: str, labels: list[str], values: list[str], value: float):
    """A gauge family with one sample."""
    fam = GaugeMetricFamily(name, doc, labels=labels)
    fam.add_metric(values, value)
    return fam


def histogram_family(name: str, doc: str, labels: list[str], values: list[str],
                     key_labels: list[str], *sources: tuple[Histogram, Callable]):
    """One histogram family: `labels`/`values` first (cluster, node), then `key_labels`,
    whose values are `key_values(key)` for each key a source (hist, key_values) recorded."""
    fam = HistogramMetricFamily(name, doc, labels=labels + key_labels)
    for hist, key_values in sources:
        bounds = [floatToGoString(b) for b in hist.bounds] + ["+Inf"]
        for key, s in list(hist.series.items()):
            total, buckets = 0, []
            for le, n in zip(bounds, s[:-1]):
                total += n
                buckets.append((le, total))
            fam.add_metric(values + [str(v) for v in key_values(key)], buckets, s[-1])
    return fam


async def serve(registry: CollectorRegistry, host: str, port: int) -> asyncio.Server:
    """GET (any path) -> the metrics in Prometheus' text format; anything else: 405."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            if request.split(b" ", 1)[0] != b"GET":
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")
            else:
                body = generate_latest(registry)
                writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\n"
                             f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                             .encode() + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            pass  # a scraper that went away or sent no request: nothing to answer
        except Exception:  # noqa: BLE001 - a collector failed: say so, keep serving
            log.exception("metrics scrape failed")
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")
        finally:
            writer.close()
    return await asyncio.start_server(handle, host, port)


def port_of(server: asyncio.Server | None) -> int | None:
    return server.sockets[0].getsockname()[1] if server is not None else None
