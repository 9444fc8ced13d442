"""The official Python SDK against a three-node cluster: the scenarios of
test_sdk.py, unchanged, with the client dialing a node that does not lead
the cluster (so the Rust SDK inside the wheel has to find the leader
itself, and follow it)."""

import re
import time

import pytest

import test_sdk


def leader_id(nodes) -> int:
    """The node id the first node's live status names as the leader (it
    says `node 1: leader` or `node 1: follower of node N`)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = nodes[0].wait_notification("cluster pycompat node 1: ", timeout_s=20)
        if ": leader" in status:
            return 1
        follower = re.search(r"follower of node (\d+)", status)
        if follower:
            return int(follower.group(1))
    raise AssertionError("no leader named within 20 s")


@pytest.mark.parametrize(
    "scenario",
    [
        test_sdk.test_login_create_stream_and_topic,
        test_sdk.test_ten_thousand_messages_with_headers_by_offset_and_next,
        test_sdk.test_consumer_group_join_and_poll,
    ],
    ids=lambda scenario: scenario.__name__,
)
def test_sdk_scenarios_through_a_follower(cluster, scenario):
    """Proves each SDK scenario of test_sdk.py passes against a cluster
    when the client dials a node that does not lead."""
    leader = leader_id(cluster)
    follower = cluster[leader % len(cluster)]  # the node after the leader
    assert follower is not cluster[leader - 1]
    scenario(follower)
