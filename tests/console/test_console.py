"""The console in a real browser against a real DLedger group: each page shows what the
admin API (the CLI's) answers, the forms change the cluster, and the replica page follows
a failover. The failover test runs last: it kills the group's leader."""
from __future__ import annotations

import signal
import threading

from ledgermq import Message, __version__
from ledgermq.client.producer import Producer
from ledgermq.client.push import PushConsumer
from ledgermq.client.sync import Blocking
from ledgermq.localcluster.cluster import stop

from ..wait import wait_until


def send(namesrv: str, msgs: list[Message]):
    p = Blocking(Producer, "console-test-producer", namesrv)
    p.start()
    try:
        return [p.send(m) for m in msgs]
    finally:
        p.shutdown()


def brokers_by_addr(admin) -> dict[str, str]:
    info = admin.cluster_list()
    return {addr: admin.broker_status(addr)["brokerRole"]
            for entry in info["brokerAddrTable"].values()
            for addr in entry["brokerAddrs"].values()}


def test_cluster_page_shows_every_broker_and_role_as_the_admin_api(dledger, page):
    expected = brokers_by_addr(dledger["admin"])
    page.goto(dledger["url"] + "/")
    rows = page.locator("#brokers tbody tr[data-addr]").all()
    shown = {r.get_attribute("data-addr"): r.locator(".role").inner_text() for r in rows}
    assert shown == expected and len(shown) == 3
    assert set(page.locator("#brokers .version").all_inner_texts()) == {f"ledgermq {__version__}"}


def test_topics_named_after_a_broker_group_are_listed_as_system_topics(dledger, page):
    """Every broker serves a topic named after its group (brokerTopicEnable, e.g.
    `broker-a`) and one after its cluster: the topics page lists them only among the
    system topics, as RocketMQ's dashboard does."""
    groups = set(dledger["admin"].cluster_list()["brokerAddrTable"])
    assert groups <= set(dledger["admin"].topic_list())
    page.goto(dledger["url"] + "/topics")
    listed = {r.get_attribute("data-topic") for r in page.locator("#topics tr[data-topic]").all()}
    assert not groups & listed
    page.goto(dledger["url"] + "/topics?system=1")
    listed = {r.get_attribute("data-topic") for r in page.locator("#topics tr[data-topic]").all()}
    assert groups <= listed


def test_a_topic_created_on_the_page_is_routed_and_its_queues_match(dledger, page):
    admin, url = dledger["admin"], dledger["url"]
    page.goto(url + "/topics")
    page.fill("#create-topic input[name=topic]", "PageTopic")
    page.fill("#create-topic input[name=queues]", "4")
    page.click("#create-topic button[type=submit]")
    page.wait_for_url("**/topics/PageTopic?updated=1")
    route = admin.topic_route("PageTopic")
    assert [q["writeQueueNums"] for q in route["queueDatas"]] == [4]
    send(dledger["namesrv"], [Message("PageTopic", b"m%d" % i) for i in range(10)])
    page.goto(url + "/topics/PageTopic")
    shown = {r.get_attribute("data-queue"): int(r.locator(".max").inner_text())
             for r in page.locator("#queues tbody tr").all()}
    expected = {f"{q['brokerName']}/{q['queueId']}": q["maxOffset"]
                for q in admin.topic_status("PageTopic")}
    # (at least 10: a send whose answer a leader change swallowed is sent again, as
    # RocketMQ's producer does; CI once saw 11)
    total = sum(shown.values())
    assert shown == expected and total >= 10
    page.goto(url + "/topics")
    assert page.locator('#topics tr[data-topic="PageTopic"] .messages').inner_text() == str(total)


def test_message_search_by_key_by_id_and_by_queue_and_time(dledger, page):
    url = dledger["url"]
    sent = send(dledger["namesrv"], [Message("SearchTopic", b"hello console <b>", tags="T1",
                                             keys="order-42")])[0]
    page.goto(url + "/messages")
    page.fill("#by-key input[name=topic]", "SearchTopic")
    page.fill("#by-key input[name=key]", "order-42")
    page.click("#by-key button")
    # (each copy the same message: a send a leader change swallowed is sent again)
    found = page.locator("article.message")
    assert found.count() >= 1
    assert {a.get_attribute("data-msgid") for a in found.all()} == {sent.msg_id}
    found = found.first
    assert found.locator("pre.body").inner_text() == "hello console <b>"  # escaped, shown
    leader = sent.queue.broker_name
    assert dledger["admin"].master_addrs()[leader] in found.locator(".where").inner_text()

    page.fill("#by-id input[name=id]", sent.offset_msg_id)
    page.click("#by-id button")
    assert page.locator("article.message").get_attribute("data-msgid") == sent.msg_id

    page.fill("#by-time input[name=topic]", "SearchTopic")
    page.fill("#by-time input[name=broker]", leader)
    page.fill("#by-time input[name=queue]", str(sent.queue.queue_id))
    page.fill("#by-time input[name=time]", "earliest")
    page.click("#by-time button")
    assert sent.msg_id in [a.get_attribute("data-msgid")
                           for a in page.locator("article.message").all()]


def test_group_page_shows_members_and_lag_and_resets_offsets(dledger, page):
    admin, url, ns = dledger["admin"], dledger["url"], dledger["namesrv"]
    admin.update_topic("GroupTopic", read_queues=2, write_queues=2)
    send(ns, [Message("GroupTopic", b"g%d" % i) for i in range(6)])
    got, all_in = [], threading.Event()

    def listener(msgs):
        got.extend(msgs)
        if len(got) >= 6:
            all_in.set()
        return True
    c = Blocking(PushConsumer, "console-group", ns, consume_from="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe("GroupTopic")
    c.register_listener(listener)
    c.start()
    try:
        assert all_in.wait(20), f"the consumer got {len(got)} of 6"
        members = {m["clientId"] for m in admin.consumer_connections("console-group")}
        page.goto(url + "/groups/console-group")
        assert set(page.locator("#members .client").all_inner_texts()) == members != set()
    finally:
        c.shutdown()  # commits its offsets
    page.goto(url + "/groups")
    assert page.locator('#groups tr[data-group="console-group"]').count() == 1
    rows = wait_until(lambda: [r for r in admin.consumer_progress("console-group")
                               if r["diff"] == 0] and admin.consumer_progress("console-group"),
                      "the group's offsets committed")
    assert sum(r["diff"] for r in rows) == 0
    page.goto(url + "/groups/console-group")
    assert page.locator("#total-lag").inner_text() == "0"

    page.fill("#reset-offset input[name=topic]", "GroupTopic")
    page.fill("#reset-offset input[name=time]", "earliest")
    page.click("#reset-offset button")
    page.wait_for_url("**/groups/console-group?reset=GroupTopic:*")
    after = admin.consumer_progress("console-group")
    assert [r["consumerOffset"] for r in after if r["topic"] == "GroupTopic"] == [0, 0]
    assert page.locator("#total-lag").inner_text() == "6"
    shown = {r.get_attribute("data-queue"): int(r.locator(".lag").inner_text())
             for r in page.locator("#lag tbody tr").all()}
    assert shown == {f"{r['topic']}/{r['brokerName']}/{r['queueId']}": r["diff"] for r in after}


def test_bad_input_gets_a_clear_error_and_the_console_keeps_serving(dledger, page):
    url = dledger["url"]
    page.goto(url + "/topics")
    token = page.locator("#create-topic input[name=_csrf]").get_attribute("value")
    r = page.request.post(url + "/topics", form={"topic": "bad topic!", "queues": "4",
                                                 "_csrf": token})
    assert r.status == 502 and "is invalid" in r.text()
    r = page.request.post(url + "/topics", form={"topic": "Fine", "queues": "0",
                                                 "_csrf": token})
    assert r.status == 400 and "queues: expected a whole number in 1..1024" in r.text()
    r = page.request.get(url + "/messages?by=id&id=zz")
    assert r.status == 400 and "is not a message id" in r.text()
    r = page.request.get(url + "/messages?by=key&topic=NoSuchTopic&key=x")
    assert r.status == 502 and "NoSuchTopic" in r.text()
    page.goto(url + "/")
    assert page.locator("#brokers tbody tr[data-addr]").count() == 3


def test_a_topic_deleted_on_the_page_is_gone(dledger, page):
    admin, url = dledger["admin"], dledger["url"]
    admin.update_topic("DoomedTopic", read_queues=2, write_queues=2)
    page.goto(url + "/topics/DoomedTopic")
    page.once("dialog", lambda d: d.accept())
    page.click("#delete-topic button")
    page.wait_for_url("**/topics?deleted=DoomedTopic")
    assert "DoomedTopic" not in admin.topic_list()
    assert page.locator('#topics tr[data-topic="DoomedTopic"]').count() == 0


def test_replica_page_follows_a_failover(dledger, page, tmp_path):
    d, url, state = dledger["dir"], dledger["url"], dledger["state"]
    page.goto(url + "/replicas")
    master = page.locator('section.group[data-group="broker-a"] .master')
    old = wait_until(lambda: master.inner_text() if ":" in master.inner_text() else None,
                     "the page to show broker-a's master")
    victim = next(p for p in state["processes"] if p.get("kind") == "broker"
                  and f"{p['host']}:{p['port']}" == old)
    stop(d, victim["name"], signal.SIGKILL)
    # the page refreshes itself: wait for it to show another master, with no reload
    page.wait_for_function(
        """old => { const m = document.querySelector('section.group[data-group="broker-a"] .master');
                    return m && m.textContent.includes(':') && m.textContent !== old; }""",
        arg=old, timeout=30_000)
    new = master.inner_text()
    assert dledger["admin"].broker_status(new)["brokerRole"] == "LEADER"
    election = page.locator("#elections tbody tr").first
    assert election.locator(".from").inner_text() == old
    assert election.locator(".to").inner_text() == new
    gone = page.locator(f'section.group tr[data-addr="{old}"]')
    assert gone.locator(".role").inner_text() == "UNREACHABLE"
    page.wait_for_function("document.querySelectorAll('svg.chart line.election').length > 0")
    assert page.locator("svg.chart polyline").count() >= 2
    shot = tmp_path / "replicas.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
