"""kproto's codec against kafka-python's, which is an independent implementation
of the same wire format, for every API and version both define.

kafka-python 3.x carries two protocol implementations:
- kafka.protocol.{admin,consumer,metadata,producer,sasl}: classes built from
  its own copy of Kafka's JSON definitions (a newer Kafka release than ours)
  by its own reader/writer generator;
- kafka.protocol.old: the hand-written 2.x Struct schemas (Produce v0-8,
  Fetch v0-11, Metadata v0-8, group APIs ...), written independently of the
  JSON files altogether.

For each (API, version, request/response) random valid messages go both ways:
kproto encodes -> kafka-python decodes -> every field agrees and kafka-python
re-encodes the same bytes; kafka-python builds the same message from its own
classes -> encodes -> kproto decodes an equal message.
"""
from __future__ import annotations

import importlib
import io
import pkgutil
import uuid

import pytest
from hypothesis import HealthCheck, given, settings

from kproto.api import APIS, request_class, response_class
from tests.protocol_strategies import message

kafka = pytest.importorskip("kafka")
from kafka.protocol.api_message import ApiMessage  # noqa: E402
from kafka.protocol.schemas.fields.base import BaseField  # noqa: E402

EXAMPLES = settings(max_examples=8, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ZERO_UUID = uuid.UUID(int=0)


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _kp_classes():
    for pkg in ("admin", "consumer", "metadata", "producer", "sasl"):
        importlib.import_module(f"kafka.protocol.{pkg}")
    out = {}
    for c in _subclasses(ApiMessage):
        if c._class_version is None:   # the primary class, not a versioned view
            out[(c.API_KEY, "request" if c.is_request() else "response")] = c
    return out


def _ours(api_key, kind):
    return request_class(api_key) if kind == "request" else response_class(api_key)


def _in(span, v):
    return span is not None and span[0] <= v <= span[1]


# ---------------------------------------------------------------------------
# kafka-python's JSON-generated classes

KP = _kp_classes()
JSON_CASES = []
for (_key, _kind), _c in sorted(KP.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    if _key not in APIS:
        continue
    _ours_cls = _ours(_key, _kind)
    # _valid_versions is the range of kafka-python's JSON file, before it
    # widens the lower bound to 0 (its file no longer describes the dropped
    # old versions, so they are compared against the hand-written classes).
    _lo = max(_c._valid_versions[0], _ours_cls.MIN_VERSION)
    _hi = min(_c._valid_versions[1], _ours_cls.MAX_VERSION)
    for _v in range(_lo, _hi + 1):
        JSON_CASES.append(pytest.param(_key, _kind, _v, id=f"{_ours_cls.NAME}-v{_v}"))


# Fields Kafka renamed after the release our definitions come from (same
# wire format): ListClientMetricsResources became ListConfigResources (KIP-1142).
RENAMED = {"ClientMetricsResources": "ConfigResources", "Name": "ResourceName"}


def _kp_field(kp_struct, json_name):
    fields = kp_struct.fields
    name = BaseField.underscore_name(json_name)
    if name in fields:
        return fields[name]
    if json_name in RENAMED:
        return fields[BaseField.underscore_name(RENAMED[json_name])]
    # kafka-python renames *AuthorizedOperations to a bit-set field
    if json_name.endswith("AuthorizedOperations") and "authorized_operations" in fields:
        return fields["authorized_operations"]
    raise AssertionError(f"kafka-python has no field {json_name} in {kp_struct.name}")


def _bits(value):
    """kproto's int32 authorized-operations value as kafka-python's bit set."""
    if value is None:
        return None
    bits = {b for b in range(32) if (value & 0xFFFFFFFF) >> b & 1}
    return None if bits == {31} else bits


def _comparable(msg):
    if msg.NAME == "ApiVersionsResponse":
        # kafka-python reads the body of an ApiVersionsResponse that carries
        # an error as v0 (the broker's answer to a version it lacks)
        msg.error_code = 0


def _present(schema_row, version):
    return _in(schema_row[3], version)


def assert_same(ours, theirs, kp_struct, version, path):
    """Every field kproto defines at this version has the same value in
    kafka-python's decoded object."""
    for row in type(ours)._schema:
        attr, json_name, typ, _versions, _nullable, _tagged, _tag = row
        if not _present(row, version):
            continue
        kpf = _kp_field(kp_struct, json_name)
        assert kpf.for_version_q(version), f"{path}.{json_name}: kafka-python lacks it at v{version}"
        mine, other = getattr(ours, attr), getattr(theirs, kpf.name)
        where = f"{path}.{json_name}"
        elem = typ[2:] if typ.startswith("[]") else typ
        if kpf.type_str == "bitfield":
            assert _bits(mine) == other, where
        elif typ.startswith("[]") and kpf.is_struct_array():
            assert (mine is None) == (other is None), where
            if mine is not None:
                assert len(mine) == len(other), where
                for i, (a, b) in enumerate(zip(mine, other)):
                    assert_same(a, b, kpf, version, f"{where}[{i}]")
        elif kpf.is_struct():
            assert (mine is None) == (other is None), where
            if mine is not None:
                assert_same(mine, other, kpf, version, where)
        elif elem in ("bytes", "records"):
            assert (mine is None) == (other is None), where
            if mine is not None:
                assert bytes(mine) == bytes(other), where
        elif elem == "uuid":
            norm = (lambda u: ZERO_UUID if u is None else u)
            if typ.startswith("[]"):
                assert [norm(u) for u in mine] == [norm(u) for u in other], where
            else:
                assert norm(mine) == norm(other), where
        else:
            assert mine == other, f"{where}: kproto {mine!r} != kafka-python {other!r}"


def to_kp(ours, data_class, kp_struct, version):
    """Build kafka-python's own object for the message kproto holds."""
    kwargs = {}
    for row in type(ours)._schema:
        attr, json_name, typ, *_ = row
        if not _present(row, version):
            continue
        kpf = _kp_field(kp_struct, json_name)
        val = getattr(ours, attr)
        if kpf.type_str == "bitfield":
            val = _bits(val)
        elif typ.startswith("[]") and kpf.is_struct_array():
            val = None if val is None else [to_kp(x, kpf.data_class, kpf, version) for x in val]
        elif kpf.is_struct():
            val = None if val is None else to_kp(val, kpf.data_class, kpf, version)
        elif typ in ("bytes", "records") and val is not None:
            val = bytes(val)
        kwargs[kpf.name] = val
    return data_class(version=version, **kwargs)


@pytest.mark.parametrize("api_key,kind,version", JSON_CASES)
def test_against_kafka_python(api_key, kind, version):
    ours_cls = _ours(api_key, kind)
    kp_cls = KP[(api_key, kind)]
    flexible = ours_cls.FLEXIBLE_FROM is not None and version >= ours_cls.FLEXIBLE_FROM
    assert kp_cls.flexible_version_q(version) == flexible

    @EXAMPLES
    @given(message(ours_cls, version, flexible))
    def check(msg):
        _comparable(msg)
        data = msg.encode(version)
        # kproto -> kafka-python
        theirs = kp_cls.decode(data, version=version)
        assert_same(msg, theirs, kp_cls._struct, version, ours_cls.NAME)
        # (its schema walker, not the compiled writer `encode` uses below)
        assert kp_cls._struct.encode(theirs, version=version, compact=flexible, tagged=flexible) == data
        # kafka-python builds the message itself -> kproto
        built = to_kp(msg, kp_cls, kp_cls._struct, version)
        wire = built.encode(version=version)
        assert ours_cls.decode(wire, version) == msg
        assert wire == data

    check()


# ---------------------------------------------------------------------------
# kafka-python's hand-written (2.x) schemas

def _old_classes():
    import kafka.protocol.old as old
    out = {}
    for info in pkgutil.iter_modules(old.__path__):
        mod = importlib.import_module(f"kafka.protocol.old.{info.name}")
        for name, c in vars(mod).items():
            if (isinstance(c, type) and c.__module__ == mod.__name__ and "_v" in name
                    and isinstance(getattr(c, "API_KEY", None), int)
                    and isinstance(getattr(c, "API_VERSION", None), int)):
                kind = "request" if "Request" in name else "response"
                # ListGroupsRequest_v2 claims API_VERSION 1: trust the name
                version = int(name.rsplit("_v", 1)[1])
                out[(c.API_KEY, kind, version)] = c
    return out


# Errata in kafka-python's hand-written schemas, where it disagrees with
# Kafka's definitions (its JSON-generated classes above get them right):
KAFKA_PYTHON_ERRATA = {
    # v2 is flexible (compact strings, tagged fields) in Kafka; written classic
    (29, "request", 2), (29, "response", 2),
    # Partitions is []int32 in Kafka; written as a single int32
    (35, "request", 0),
}
# Same bytes, different nesting: kafka-python groups Count and Assignments
# of a topic into one sub-struct, so only the bytes are compared.
SHAPE_DIFFERS = {(37, "request", 0), (37, "request", 1)}

OLD = _old_classes()
OLD_CASES = [pytest.param(k, kind, v, id=f"{_ours(k, kind).NAME}-v{v}")
             for (k, kind, v) in sorted(OLD)
             if k in APIS and _ours(k, kind).MIN_VERSION <= v <= _ours(k, kind).MAX_VERSION
             and (k, kind, v) not in KAFKA_PYTHON_ERRATA]


def _old_types():
    from kafka.protocol.old import types as t
    return t


def wire_values(obj, version):
    """The untagged field values of a kproto message in wire order, nested
    structs as tuples: the shape kafka-python's Schema.decode returns."""
    vals = []
    for row in type(obj)._schema:
        attr, _name, typ, versions, _nullable, tagged, _tag = row
        if not _in(versions, version) or _in(tagged, version):
            continue
        v = getattr(obj, attr)
        elem = typ[2:] if typ.startswith("[]") else typ
        struct_type = elem not in ("int8", "int16", "int32", "int64", "uint16", "uint32", "float64",
                                   "bool", "string", "bytes", "records", "uuid")
        if v is None:
            vals.append(None)
        elif typ.startswith("[]") and struct_type:
            vals.append([wire_values(x, version) for x in v])
        elif struct_type:
            vals.append(wire_values(v, version))
        elif elem in ("bytes", "records"):
            vals.append(bytes(v))
        elif elem == "uuid":
            vals.append(None if v == ZERO_UUID else v)   # kafka-python reads the zero uuid as None
        else:
            vals.append(v)
    return tuple(vals)


def old_values(value, typ):
    """kafka-python's decoded value in the same shape, tagged-field dicts dropped."""
    t = _old_types()
    if isinstance(typ, t.Schema):
        return tuple(old_values(value[i], f) for i, f in enumerate(typ.fields)
                     if f is not t.TaggedFields and i < len(value))
    if isinstance(typ, t.Array):
        return None if value is None else [old_values(x, typ.array_of) for x in value]
    return value


def _align(ours, typ):
    """kproto's wire values in the hand-written schema's shapes: bit sets for
    authorized operations, and a bare value where kafka-python declares an
    array of a primitive and Kafka an array of one-field structs."""
    t = _old_types()
    if isinstance(typ, t.Schema):
        fields = [f for f in typ.fields if f is not t.TaggedFields]
        return tuple(_align(v, f) for v, f in zip(ours, fields))
    if isinstance(typ, t.Array):
        if ours is None:
            return None
        if not isinstance(typ.array_of, t.Schema):
            ours = [x[0] if isinstance(x, tuple) and len(x) == 1 else x for x in ours]
        return [_align(x, typ.array_of) for x in ours]
    if typ is t.BitField:
        return _bits(ours)
    return ours


@pytest.mark.parametrize("api_key,kind,version", OLD_CASES)
def test_against_kafka_python_handwritten(api_key, kind, version):
    ours_cls = _ours(api_key, kind)
    old_cls = OLD[(api_key, kind, version)]
    flexible = ours_cls.FLEXIBLE_FROM is not None and version >= ours_cls.FLEXIBLE_FROM
    schema = old_cls.SCHEMA
    t = _old_types()
    names = [n for n, f in zip(schema.names, schema.fields) if f is not t.TaggedFields]

    @EXAMPLES
    @given(message(ours_cls, version, flexible))
    def check(msg):
        _comparable(msg)
        data = msg.encode(version)
        # kproto -> kafka-python
        theirs = old_cls.decode(io.BytesIO(data))
        assert theirs.encode() == data
        if (api_key, kind, version) in SHAPE_DIFFERS:
            return
        expected = _align(wire_values(msg, version), schema)
        got = old_values(tuple(getattr(theirs, n) for n in schema.names), schema)
        assert got == expected
        # kafka-python builds the message from the same values -> kproto
        fields = dict(zip(names, expected))
        if schema.has_tagged_fields():
            # the hand-written classes keep tagged fields as raw (tag -> bytes)
            fields["tags"] = theirs.tags
        built = old_cls(**fields)
        wire = built.encode()
        assert wire == data
        assert ours_cls.decode(wire, version) == msg

    check()
