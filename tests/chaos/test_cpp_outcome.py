"""How the workload books a failed send of RocketMQ's C++ client: only an error raised
before any request left the client is a definite failure; any other may have been stored
(the checker would call a "fail" that is later read a broken history)."""
from ledgermq.chaos.workload import cpp_error_outcome


def test_only_a_send_that_never_left_the_client_is_booked_failed():
    assert cpp_error_outcome("ProducerSendSyncFailed: No route info of this topic: "
                             "ChaosTopic,error:-1,in file rocketmq-client-cpp") == "fail"
    for maybe_stored in ("ProducerSendSyncFailed: send failed of broker: wait response "
                         "timeout", "ProducerSendSyncFailed: connect to 10.0.0.1 failed",
                         "No route info"):  # (not the client's exception: unknown)
        assert cpp_error_outcome(maybe_stored) == "info"
