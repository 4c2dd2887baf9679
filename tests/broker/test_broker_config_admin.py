"""mqadmin's getBrokerConfig/updateBrokerConfig as the broker answers them
(processors/broker_config.py): secrets never listed; a change is checked as broker.conf's
keys are and applied all or none."""
from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.processors.broker_config import apply, properties_text
from ledgermq.runtime.config import parse_properties
from ledgermq.store.config import StoreConfig


def test_the_listing_has_every_key_but_the_secrets():
    text = properties_text(BrokerConfig(clusterSecret="s3cret" * 6), StoreConfig())
    listed = parse_properties(text, "the listing")
    assert listed["brokerName"] == "broker-a" and listed["flushDiskType"] == "ASYNC_FLUSH"
    assert listed["autoCreateTopicEnable"] in ("true", "false")
    assert "clusterSecret" not in listed and "s3cret" not in text


def test_a_change_is_checked_and_applied_all_or_none():
    broker, store = BrokerConfig(), StoreConfig()
    assert apply({"maxMessageSize": "65536", "transactionCheckMax": "3"}, broker, store) is None
    assert (store.maxMessageSize, broker.transactionCheckMax) == (65536, 3)
    for change, why in [({"maxMessageSize": "lots"}, "is not a valid int"),
                        ({"maxMessageSize": "0"}, "must be greater than 0"),
                        ({"noSuchKey": "1"}, "unknown config keys: noSuchKey"),
                        ({"maxMessageSize": "1024", "brokerName": "b"},
                         "brokerName is read when the broker starts")]:
        assert why in apply(change, broker, store)
    assert (store.maxMessageSize, broker.brokerName) == (65536, "broker-a")  # untouched
