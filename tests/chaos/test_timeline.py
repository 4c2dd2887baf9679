"""timeline.png from a synthetic history: written, a real picture of the stated size, with
each fault window shaded and labelled."""
import struct

from ledgermq.chaos import timeline
from ledgermq.chaos.history import History


def synthetic():
    """60 s of sends every 20 ms; a partition from 20 to 30 s during which sends time out
    (indeterminate, 1 s each) and latency climbs after it; a kill from 40 to 45 s."""
    h = History(clock=lambda: 0.0)
    h.meta(mode="dledger", seed=3, faults=["partition", "kill"])
    n = h.fault_start("partition:isolate", ["n1"], at=20.0)
    h.fault_end(n, at=30.0)
    n = h.fault_start("kill", ["n2"], at=40.0)
    h.fault_end(n, at=45.0)
    for i in range(3000):
        t = i * 0.02
        m = f"m{i}"
        h.invoke(m, topic="T", queue=i % 4, at=t)
        if 20 <= t < 30:
            h.complete(m, "info", error="timeout", at=t + 1.0)
        elif 40 <= t < 41:
            h.complete(m, "fail", error="SERVICE_NOT_AVAILABLE", at=t + 0.001)
        else:
            h.complete(m, "ok", queue=i % 4, at=t + (0.05 if 30 <= t < 33 else 0.002))
    h.drain_start(at=60.0)
    h.drain_end(at=61.0)
    return h


def png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_the_timeline_png_is_written_with_its_size(tmp_path):
    out = timeline.render(synthetic(), tmp_path / "timeline.png")
    assert out == tmp_path / "timeline.png"
    assert png_size(out) == (timeline.WIDTH_PX, timeline.HEIGHT_PX) == (1400, 800)
    assert out.stat().st_size > 30_000  # two panels of data, not a blank canvas


def test_fault_windows_are_shaded_and_labelled(tmp_path):
    from PIL import Image  # comes with matplotlib

    h = synthetic()
    fig = timeline.figure(h)
    rate, latency = fig.axes
    labels = [t.get_text() for t in rate.texts]
    assert any("partition:isolate" in s and "n1" in s for s in labels)
    assert any("kill" in s and "n2" in s for s in labels)
    out = timeline.render(h, tmp_path / "timeline.png")
    img = Image.open(out).convert("RGB")
    fig.canvas.draw()

    def pixel(ax, t):  # the colour at time t, halfway up the axes
        x, _ = ax.transData.transform((t, 0))
        _, y = ax.transAxes.transform((0, 0.5))
        return img.getpixel((int(x), int(img.height - y)))
    for ax in (rate, latency):
        inside, outside = pixel(ax, 25.5), pixel(ax, 36.0)
        assert outside == (255, 255, 255), outside  # the plain background between faults
        assert inside != outside and inside[0] > 150  # shaded (a light tint) in the window


def test_the_title_names_the_run_and_an_empty_history_still_draws(tmp_path):
    fig = timeline.figure(synthetic())
    assert "dledger" in fig.texts[0].get_text() and "seed 3" in fig.texts[0].get_text()
    out = timeline.render(History(clock=lambda: 0.0), tmp_path / "empty.png")
    assert png_size(out) == (1400, 800)
