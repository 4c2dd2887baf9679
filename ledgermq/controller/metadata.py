"""The controller's metadata per broker group (S1-1 … S1-3), sans-IO and deterministic.

Commands are applied in log order and their outcome depends only on the state and the
command, never on a clock: whether a broker is alive is decided by the controller leader
from heartbeats and written *into* the ElectMaster command. MasterEpoch and the
SyncStateSet's epoch only grow.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class RegisterBroker:
    cluster: str
    group: str
    addr: str
    ha_addr: str = ""  # where slaves connect to copy this broker's log when it is master


@dataclass(frozen=True)
class AlterSyncStateSet:
    """The master asks to shrink or expand its SyncStateSet (S1-2)."""

    group: str
    master_id: int
    master_epoch: int
    sync_state_set: tuple[int, ...]
    set_epoch: int  # the epoch of the set the master changes


@dataclass(frozen=True)
class ElectMaster:
    """Master lost (or an operator's electMaster): pick from the SyncStateSet (S1-3)."""

    group: str
    # broker ids the leader heard from lately, in its order of preference (the most
    # up-to-date first): applying takes the first one that qualifies
    alive: tuple[int, ...]
    preferred: int | None = None
    unclean: bool = False  # enableElectUncleanMaster: may pick outside the SyncStateSet
    operator: bool = False  # an operator's electMaster may replace a live master


@dataclass(frozen=True)
class CleanBrokerMetadata:
    group: str
    broker_ids: tuple[int, ...] = ()  # empty: the whole group


COMMANDS = {c.__name__: c for c in (RegisterBroker, AlterSyncStateSet, ElectMaster,
                                     CleanBrokerMetadata)}


def encode_command(cmd) -> bytes:
    return json.dumps({"type": type(cmd).__name__, **asdict(cmd)}).encode()


def decode_command(data: bytes):
    d = json.loads(data)
    cls = COMMANDS[d.pop("type")]
    for k in ("alive", "sync_state_set", "broker_ids"):
        if k in d and d[k] is not None:
            d[k] = tuple(d[k])
    return cls(**d)


@dataclass
class Result:
    ok: bool
    error: str = ""
    data: dict = field(default_factory=dict)


@dataclass
class BrokerGroup:
    cluster: str
    name: str
    brokers: dict[int, str] = field(default_factory=dict)  # broker id -> address
    ha_addrs: dict[int, str] = field(default_factory=dict)  # broker id -> HA address
    next_id: int = 1
    master: int | None = None
    master_epoch: int = 0
    sync_state_set: tuple[int, ...] = ()
    set_epoch: int = 0

    def view(self) -> dict:
        return {"cluster": self.cluster, "group": self.name,
                "brokers": {str(k): v for k, v in sorted(self.brokers.items())},
                "masterBrokerId": self.master,
                "masterAddress": self.brokers.get(self.master) if self.master else None,
                "masterHaAddress": self.ha_addrs.get(self.master) if self.master else None,
                "masterEpoch": self.master_epoch, "syncStateSet": list(self.sync_state_set),
                "syncStateSetEpoch": self.set_epoch}


STALE_SET_EPOCH = "is stale"  # in a refusal: the set changed since (maybe by this very ask)
NOT_THE_MASTER = "is not the master"  # in a refusal: the master changed since that ask
INVALID_CHANGE = "invalid SyncStateSet change"  # in a refusal: no copy of it can apply


def refusal_may_have_applied(remark: str) -> bool:
    """Can an AlterSyncStateSet refused with `remark` answer a copy of a change that did
    apply? Yes unless the change itself is invalid: a stale set epoch may be the ask's own
    doing, a deposed master's earlier copy may have applied before the controller moved on,
    and a leader that lost its term (or a quorum) before committing may see its successor
    commit it all the same. Only a view tells then."""
    return INVALID_CHANGE not in remark


BUGS = {"elect-outside-sync-set": "ElectMaster picks any live broker, in sync or not, "
                                  "without saying it was unclean"}


class ControllerMetadata:
    def __init__(self, bug: str | None = None):
        self.groups: dict[str, BrokerGroup] = {}
        self.bug = bug

    def apply(self, cmd) -> Result:
        handler = getattr(self, "_" + type(cmd).__name__, None)
        if handler is None:
            return Result(False, f"unknown command {type(cmd).__name__}")
        return handler(cmd)

    # ---- commands -------------------------------------------------------------------
    def _RegisterBroker(self, c: RegisterBroker) -> Result:
        g = self.groups.get(c.group)
        if g is None:
            g = self.groups[c.group] = BrokerGroup(c.cluster, c.group)
        bid = next((b for b, addr in g.brokers.items() if addr == c.addr), None)
        if bid is None:  # a broker is known by its address: the same one keeps its id
            bid = g.next_id
            g.next_id += 1
            g.brokers[bid] = c.addr
        if c.ha_addr:
            g.ha_addrs[bid] = c.ha_addr
        return Result(True, data={"brokerId": bid, **g.view()})

    def _AlterSyncStateSet(self, c: AlterSyncStateSet) -> Result:
        g = self.groups.get(c.group)
        if g is None:
            return Result(False, f"{INVALID_CHANGE}: broker group {c.group} is not "
                                 "registered")
        if c.master_id != g.master or c.master_epoch != g.master_epoch:
            return Result(False, f"broker {c.master_id} in epoch {c.master_epoch} "
                                 f"{NOT_THE_MASTER} (master {g.master}, epoch {g.master_epoch})")
        if c.set_epoch != g.set_epoch:
            return Result(False, f"SyncStateSet epoch {c.set_epoch} {STALE_SET_EPOCH} (now "
                                 f"{g.set_epoch})")
        if c.master_id not in c.sync_state_set:
            return Result(False, f"{INVALID_CHANGE}: a SyncStateSet must contain its master")
        unknown = [b for b in c.sync_state_set if b not in g.brokers]
        if unknown:
            return Result(False, f"{INVALID_CHANGE}: brokers {unknown} are not registered in "
                                 f"{c.group}")
        g.sync_state_set = tuple(sorted(c.sync_state_set))
        g.set_epoch += 1
        return Result(True, data=g.view())

    def _ElectMaster(self, c: ElectMaster) -> Result:
        g = self.groups.get(c.group)
        if g is None:
            return Result(False, f"broker group {c.group} is not registered")
        ranked = list(dict.fromkeys(b for b in c.alive if b in g.brokers))
        alive = set(ranked)
        in_set = [b for b in ranked if b in g.sync_state_set] if g.master is not None \
            else ranked  # a new group: every registered broker is in sync
        if self.bug == "elect-outside-sync-set":
            in_set = ranked
        before = {"previousMaster": g.master, "previousSyncStateSet": list(g.sync_state_set)}
        if c.preferred is not None:
            if c.preferred not in alive:
                return Result(False, f"broker {c.preferred} is not alive")
            if c.preferred not in in_set and not c.unclean:
                return Result(False, f"broker {c.preferred} is not in the SyncStateSet "
                                     f"{list(g.sync_state_set)} (enableElectUncleanMaster "
                                     "is false)")
            chosen, unclean = c.preferred, c.preferred not in in_set
        elif g.master in alive and not c.operator:
            return Result(True, "the master is alive: nothing to elect", {**g.view(), **before})
        elif in_set:  # an operator asking for a switch wants another broker if there is one
            others = [b for b in in_set if b != g.master] if c.operator else []
            chosen, unclean = (others or in_set)[0], False
        elif c.unclean and alive:
            chosen, unclean = ranked[0], True
        else:
            return Result(False, f"no SyncStateSet member of {c.group} is alive "
                                 f"(set {list(g.sync_state_set)}, alive {sorted(alive)})")
        g.master = chosen
        g.master_epoch += 1
        g.sync_state_set = (chosen,)
        g.set_epoch += 1
        data = {**g.view(), **before}
        if unclean:
            data["unclean"] = True  # messages acknowledged by the old set may be lost
        return Result(True, "elected outside the SyncStateSet: acknowledged messages may be "
                            "lost" if unclean else "", data)

    def _CleanBrokerMetadata(self, c: CleanBrokerMetadata) -> Result:
        g = self.groups.get(c.group)
        if g is None:
            return Result(False, f"broker group {c.group} is not registered")
        if not c.broker_ids:
            del self.groups[c.group]
            return Result(True)
        if g.master in c.broker_ids:
            return Result(False, f"broker {g.master} is the master: elect another first")
        for b in c.broker_ids:
            g.brokers.pop(b, None)
            g.ha_addrs.pop(b, None)
        kept = tuple(b for b in g.sync_state_set if b not in c.broker_ids)
        if kept != g.sync_state_set:
            g.sync_state_set = kept
            g.set_epoch += 1
        return Result(True, data=g.view())
