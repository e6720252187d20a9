"""share.version (Kafka 4.x's ShareVersion feature) turns share groups on and off: finalized at 1 on a
fresh cluster, as Kafka 4.2+ formats one; `kafka-features.sh downgrade --feature share.version=0`
(UpdateFeatures, safe downgrade) turns them off, and every share-group API then answers
UNSUPPORTED_VERSION while ApiVersions still lists it (Kafka's KafkaApis.isShareGroupProtocolEnabled);
an upgrade back to 1 turns them on, and the level survives a restart (metadata log)."""
from __future__ import annotations

import time
import uuid

import pytest

from broker.controller import features
from kproto.api import ApiKey
from kproto.errors import ErrorCode as E
from kproto.messages.describe_share_group_offsets_request import DescribeShareGroupOffsetsRequest as Describe
from kproto.messages.find_coordinator_request import FindCoordinatorRequest
from kproto.messages.share_fetch_request import ShareFetchRequest
from kproto.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from tests.test_features import _api_versions, _finalized, _update
from tests.wire_client import WireClient

pytestmark = pytest.mark.timeout(180)


def _heartbeat(c, group="sv-g"):
    for _ in range(100):        # the first FindCoordinator makes __consumer_offsets
        if c.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4).coordinators[0].error_code == 0:
            break
        time.sleep(0.1)
    return c.call(ShareGroupHeartbeatRequest(group_id=group, member_id=uuid.uuid4().hex[:22], member_epoch=0,
                                             rack_id=None, subscribed_topic_names=["sv-t"]), 1).error_code


def _share_fetch(c):
    return c.call(ShareFetchRequest(group_id="sv-g", member_id=uuid.uuid4().hex[:22], share_session_epoch=0,
                                    max_wait_ms=0, min_bytes=1, max_bytes=1024, max_records=10, batch_size=10,
                                    topics=[], forgotten_topics_data=[]), 1).error_code


def _describe_offsets(c):
    return c.call(Describe(groups=[Describe.DescribeShareGroupOffsetsRequestGroup(group_id="sv-g", topics=None)]),
                  1).groups[0].error_code


def test_share_version_turns_share_groups_off_and_on(fresh_broker):
    with WireClient(fresh_broker.bootstrap) as c:
        assert _finalized(c)["share.version"] == 1
        assert ("share.version", 0, 1) in [(f.name, f.min_version, f.max_version)
                                           for f in _api_versions(c, 4).supported_features]
        assert _heartbeat(c) == E.NONE
        # an upgrade-type update cannot lower it
        code, _msg = _update(c, share_version=(0, features.UPGRADE))["share.version"]
        assert code == E.INVALID_UPDATE_VERSION
        assert _update(c, share_version=(0, features.SAFE_DOWNGRADE)) == {"share.version": (0, None)}
        assert "share.version" not in _finalized(c)
        assert _heartbeat(c) == E.UNSUPPORTED_VERSION
        assert _share_fetch(c) == E.UNSUPPORTED_VERSION
        assert _describe_offsets(c) == E.UNSUPPORTED_VERSION
        assert ApiKey.SHARE_GROUP_HEARTBEAT in {k.api_key for k in _api_versions(c, 3).api_keys}
    fresh_broker.stop()
    fresh_broker.start()
    with WireClient(fresh_broker.bootstrap) as c:
        assert "share.version" not in _finalized(c)         # kept in the metadata log
        assert _heartbeat(c) == E.UNSUPPORTED_VERSION
        assert _update(c, share_version=(1, features.UPGRADE)) == {"share.version": (0, None)}
        assert _finalized(c)["share.version"] == 1
        assert _heartbeat(c) == E.NONE
