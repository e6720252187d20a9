"""The codecs are generated from Kafka 4.3.1's definitions, yet every version
Kafka 3.9's definitions define still encodes and decodes as 3.9 says (Kafka
4.0 dropped old versions, KIP-896; kproto keeps serving the clients that send
them). For every message and every 3.9 version: a message with every field
set encodes to the same bytes through the committed codec as through a codec
generated from the 3.9 definition, and the committed codec decodes those
bytes back. The only 3.9 versions left out are the ones 4.x superseded, listed
here by name."""
from __future__ import annotations

import importlib
import uuid
from pathlib import Path

import pytest

from tools import gen_protocol

DEFS, OLD_DEFS = gen_protocol.DEFS, gen_protocol.OLD_DEFS

# 3.9 versions whose layout 4.x replaced: the share group APIs' early-access
# v0 (unstable in 3.9; 4.1 removed it, v1 is the stable version), and
# ReadShareGroupStateSummary v0, which 4.x redefined (LeaderEpoch) while 3.9
# marked it unstable.
SUPERSEDED = {
    ("ShareGroupHeartbeatRequest", 0), ("ShareGroupHeartbeatResponse", 0),
    ("ShareGroupDescribeRequest", 0), ("ShareGroupDescribeResponse", 0),
    ("ShareFetchRequest", 0), ("ShareFetchResponse", 0),
    ("ShareAcknowledgeRequest", 0), ("ShareAcknowledgeResponse", 0),
    ("ReadShareGroupStateSummaryResponse", 0),
}
# Renamed in 4.x (same bytes): 3.9 name -> committed module
RENAMED = {"ListClientMetricsResourcesRequest": "list_config_resources_request",
           "ListClientMetricsResourcesResponse": "list_config_resources_response"}
# 3.9 share group coordinator records (early access in 3.9, nothing in kproto
# wrote them) that 4.x dropped or laid out anew: MetadataHash and
# InitializingTopics are regular fields of their version 0.
SUPERSEDED_RECORDS = {"ShareGroupPartitionMetadataKey", "ShareGroupPartitionMetadataValue",
                      "ShareGroupMetadataValue", "ShareGroupStatePartitionMetadataValue"}

pytestmark = pytest.mark.skipif(not (DEFS / "messages").is_dir() or not (OLD_DEFS / "messages").is_dir(),
                                reason="Kafka's message definitions are missing")


def _old_module(path: Path):
    """The codec tools/gen_protocol.py makes from one 3.9 definition alone."""
    defn = gen_protocol.build_definition(path)
    ns: dict = {"__name__": f"_kafka39_{defn.name}"}
    exec(compile(gen_protocol.ModuleGen(defn).generate(), str(path), "exec"), ns)
    return defn, ns[defn.name]


def _value(ftype: str, seed: int):
    """A value of a primitive type other than its default."""
    if ftype.startswith("[]"):
        return [_value(ftype[2:], seed + i) for i in range(2)]
    if ftype in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return seed % 100 + 1
    if ftype == "float64":
        return seed + 0.5
    if ftype == "bool":
        return True
    if ftype == "string":
        return f"s{seed}"
    if ftype in ("bytes", "records"):
        return bytes([seed % 256]) * 3
    if ftype == "uuid":
        return uuid.UUID(int=seed + 1)
    raise AssertionError(f"unknown type {ftype}")


def _fill_for(cls, cls_top, version, seed=1):
    """An instance of cls with every field the version carries set (arrays of
    two elements), recursively."""
    obj = cls()
    for i, (attr, _name, ftype, vs, _nullable, _tagged, _tag) in enumerate(cls._schema):
        if vs is None or not vs[0] <= version <= vs[1]:
            continue
        if ftype.startswith("[]") and hasattr(cls_top, ftype[2:]):
            sub = getattr(cls_top, ftype[2:])
            setattr(obj, attr, [_fill_for(sub, cls_top, version, seed * 7 + i + k) for k in range(2)])
        elif hasattr(cls_top, ftype):
            setattr(obj, attr, _fill_for(getattr(cls_top, ftype), cls_top, version, seed * 7 + i))
        else:
            setattr(obj, attr, _value(ftype, seed * 7 + i))
    return obj


def _cases(sub: str):
    cases = []
    for path in sorted((OLD_DEFS / sub).glob("*.json")):
        lo, hi = gen_protocol.parse_versions(gen_protocol.load_json(path)["validVersions"])
        for v in range(lo, hi + 1):
            cases.append((path, v))
    return cases


def _committed(sub: str, name: str):
    module = RENAMED.get(name, gen_protocol.module_name(name))
    return importlib.import_module(f"kproto.{sub}.{module}")


def _check(path: Path, old_cls, new_cls, old_version: int, new_version: int):
    want = _fill_for(old_cls, old_cls, old_version).encode(old_version)
    # the 3.9 bytes through the committed codec and back (not attribute by
    # attribute: 4.x renamed some fields, e.g. Vote's Candidate* to Replica*)
    decoded = new_cls.decode(want, new_version)
    assert decoded.encode(new_version) == want, f"{path.name} v{old_version}: re-encoding differs"
    assert old_cls.decode(decoded.encode(new_version), old_version).encode(old_version) == want


@pytest.mark.parametrize("sub", ["messages", "metadata", "storage"])
def test_every_39_version_encodes_as_39_defines(sub):
    checked, superseded = 0, set()
    for path, v in _cases(sub):
        defn, old_cls = _old_module(path)
        name = defn.name
        new_cls = getattr(_committed(sub, name), name.replace("ListClientMetricsResources", "ListConfigResources"))
        if (name, v) in SUPERSEDED:
            superseded.add((name, v))
            continue
        assert new_cls.MIN_VERSION <= v <= new_cls.MAX_VERSION, f"{name} v{v} is no longer generated"
        _check(path, old_cls, new_cls, v, v)
        checked += 1
    assert superseded == {s for s in SUPERSEDED if (OLD_DEFS / sub / f"{s[0]}.json").exists()}
    assert checked >= {"messages": 500, "metadata": 30, "storage": 4}[sub]


def test_coordinator_records_keep_their_39_bytes():
    """4.x writes a coordinator key as its record type then the key at version
    0 (3.9: the key's version was its record type); values keep their versions."""
    checked = 0
    for path in sorted((OLD_DEFS / "coordinator").glob("*.json")):
        defn, old_cls = _old_module(path)
        if defn.name in SUPERSEDED_RECORDS:
            continue
        for v in range(defn.lo, defn.hi + 1):
            if defn.name.endswith("Key"):
                # 3.9's OffsetCommitKey v0 is 4.x's LegacyOffsetCommitKey (type 0)
                name = "LegacyOffsetCommitKey" if (defn.name, v) == ("OffsetCommitKey", 0) else defn.name
                new_cls = getattr(_committed("coordinator", name), name)
                assert new_cls.API_KEY == v, f"{name}: record type {new_cls.API_KEY}, 3.9 key version {v}"
                _check(path, old_cls, new_cls, v, 0)
            else:
                new_cls = getattr(_committed("coordinator", defn.name), defn.name)
                _check(path, old_cls, new_cls, v, v)
            checked += 1
    assert checked >= 35
