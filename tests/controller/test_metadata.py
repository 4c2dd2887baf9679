"""The controller's metadata state machine: registration, SyncStateSet changes checked
against master and epochs, elections from the SyncStateSet (unclean only when allowed),
epochs that only grow, and commands that survive their trip through the Raft log."""
import pytest

from ledgermq.controller import (
    AlterSyncStateSet, CleanBrokerMetadata, ControllerMetadata, ElectMaster, RegisterBroker,
    decode_command, encode_command,
)


@pytest.fixture
def group():
    m = ControllerMetadata()
    for port in (1, 2, 3):
        assert m.apply(RegisterBroker("c", "g", f"127.0.0.1:{port}")).ok
    r = m.apply(ElectMaster("g", alive=(1, 2, 3)))
    assert r.ok and r.data["masterBrokerId"] == 1 and r.data["masterEpoch"] == 1
    assert m.apply(AlterSyncStateSet("g", 1, 1, (1, 2, 3), 1)).ok
    return m


def test_registration_is_idempotent_per_address():
    m = ControllerMetadata()
    a = m.apply(RegisterBroker("c", "g", "h:1")).data["brokerId"]
    b = m.apply(RegisterBroker("c", "g", "h:2")).data["brokerId"]
    assert (a, b) == (1, 2)
    assert m.apply(RegisterBroker("c", "g", "h:1")).data["brokerId"] == 1


def test_alter_sync_state_set_checks_master_epochs_and_members(group):
    g = group.groups["g"]
    assert not group.apply(AlterSyncStateSet("g", 2, 1, (2,), g.set_epoch)).ok  # not master
    assert not group.apply(AlterSyncStateSet("g", 1, 0, (1,), g.set_epoch)).ok  # old epoch
    assert not group.apply(AlterSyncStateSet("g", 1, 1, (1,), g.set_epoch - 1)).ok  # stale
    assert not group.apply(AlterSyncStateSet("g", 1, 1, (2, 3), g.set_epoch)).ok  # no master
    assert not group.apply(AlterSyncStateSet("g", 1, 1, (1, 9), g.set_epoch)).ok  # unknown
    before = g.set_epoch
    assert group.apply(AlterSyncStateSet("g", 1, 1, (1, 3), before)).ok  # shrink
    assert g.sync_state_set == (1, 3) and g.set_epoch == before + 1


def test_election_picks_from_the_sync_state_set_and_epochs_grow(group):
    group.apply(AlterSyncStateSet("g", 1, 1, (1, 3), group.groups["g"].set_epoch))
    r = group.apply(ElectMaster("g", alive=(1, 2, 3)))
    assert r.ok and r.data["masterBrokerId"] == 1 and r.data["masterEpoch"] == 1  # alive
    r = group.apply(ElectMaster("g", alive=(2, 3)))  # the master is gone
    assert r.data["masterBrokerId"] == 3 and r.data["masterEpoch"] == 2  # 2 was not in sync
    assert r.data["syncStateSet"] == [3]
    r = group.apply(ElectMaster("g", alive=(2,)))
    assert not r.ok and "enableElectUncleanMaster" not in r.error and "no SyncStateSet" in r.error
    r = group.apply(ElectMaster("g", alive=(2,), unclean=True))
    assert r.ok and r.data["masterBrokerId"] == 2 and r.data["unclean"] and "lost" in r.error
    assert r.data["masterEpoch"] == 3


def test_operator_election_of_a_preferred_broker(group):
    group.apply(AlterSyncStateSet("g", 1, 1, (1, 2), group.groups["g"].set_epoch))
    r = group.apply(ElectMaster("g", alive=(1, 2, 3), preferred=3, operator=True))
    assert not r.ok and "enableElectUncleanMaster" in r.error
    r = group.apply(ElectMaster("g", alive=(1, 2, 3), preferred=2, operator=True))
    assert r.ok and r.data["masterBrokerId"] == 2 and r.data["masterEpoch"] == 2


def test_clean_broker_metadata(group):
    assert not group.apply(CleanBrokerMetadata("g", (1,))).ok  # the master
    epoch = group.groups["g"].set_epoch
    assert group.apply(CleanBrokerMetadata("g", (3,))).ok
    assert 3 not in group.groups["g"].brokers and group.groups["g"].set_epoch == epoch + 1
    assert group.apply(CleanBrokerMetadata("g")).ok and "g" not in group.groups


def test_commands_round_trip_through_the_log_encoding():
    for cmd in (RegisterBroker("c", "g", "h:1"), AlterSyncStateSet("g", 1, 2, (1, 2), 3),
                ElectMaster("g", (1, 2), preferred=2, unclean=True), CleanBrokerMetadata("g", (2,))):
        assert decode_command(encode_command(cmd)) == cmd


def test_replicas_applying_the_same_log_agree():
    cmds = [RegisterBroker("c", "g", f"h:{i}") for i in range(4)] + [
        ElectMaster("g", (1, 2, 3, 4)), AlterSyncStateSet("g", 1, 1, (1, 2, 4), 1),
        ElectMaster("g", (2, 3, 4)), AlterSyncStateSet("g", 2, 2, (2, 4), 2)]
    views = []
    for _ in range(2):
        m = ControllerMetadata()
        for c in cmds:
            m.apply(decode_command(encode_command(c)))
        views.append(m.groups["g"].view())
    assert views[0] == views[1] and views[0]["masterBrokerId"] == 2


def test_election_takes_the_leaders_order_of_candidates(group):
    """The leader ranks the live brokers (most up-to-date first) and the command carries
    that order: applying it picks the first SyncStateSet member, not the lowest id."""
    r = group.apply(ElectMaster("g", alive=(3, 2)))  # master 1 gone; 3 holds the most
    assert r.ok and r.data["masterBrokerId"] == 3 and r.data["masterEpoch"] == 2
    group.apply(AlterSyncStateSet("g", 3, 2, (2, 3), group.groups["g"].set_epoch))
    r = group.apply(ElectMaster("g", alive=(1, 2)))  # 1 ranks first but is not in the set
    assert r.data["masterBrokerId"] == 2
