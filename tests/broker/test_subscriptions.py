"""Tag subscriptions as RocketMQ's FilterAPI reads them: "a || b" is two tags, pieces left
empty between the bars are skipped ("tagA||||tagB", which RocketMQ's own end-to-end suite
subscribes with), and an expression with no tag at all is refused."""
import pytest

from ledgermq.broker.meta.consumers import parse_subscription
from ledgermq.wire.message import tag_hash


def test_tags_and_empty_pieces():
    assert parse_subscription("*") is None and parse_subscription("") is None
    assert parse_subscription(" a || b ") == {tag_hash("a"), tag_hash("b")}
    assert parse_subscription("tagA||||tagB") == {tag_hash("tagA"), tag_hash("tagB")}
    assert parse_subscription("||tagA|| ") == {tag_hash("tagA")}
    with pytest.raises(ValueError, match="no tag"):
        parse_subscription("|| ||")
