"""What the client-driver tests share: a compiled Java driver run with its JSON lines read
back, and a topic made with ledgermq's admin client before a driver starts (RocketMQ's
clients look up routes only every 30 s)."""
import asyncio
import json
import os
import subprocess

from ledgermq.client.admin import Admin


def run_java(main: str, classes: str, classpath: str, *args, options=(),
             timeout: float = 120) -> list[dict]:
    """One command of the driver class `main` (compiled into `classes`); its JSON lines.
    `options`: JVM options besides a 256 MB heap."""
    r = subprocess.run(["java", "-Xmx256m", *options, "-cp", classes + os.pathsep + classpath,
                        main, *map(str, args)],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def create_topic(namesrv: str, topic: str, queues: int = 2, tls=None,
                 attributes: str = "") -> None:
    async def make():
        async with Admin(namesrv, tls=tls) as a:
            await a.update_topic(topic, read_queues=queues, write_queues=queues,
                                 attributes=attributes)
    asyncio.run(make())
