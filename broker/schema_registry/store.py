"""The registry's state: subjects, versions, schemas by id, compatibility
and mode settings, as the `_schemas` records say (Confluent's key/value
layout, applied in offset order by every node). Reads are answered from
here; writes are records the writer node produces and this store applies.

Confluent's records:
  SCHEMA  {"keytype":"SCHEMA","subject":S,"version":V,"magic":1} ->
          {"subject","version","id","schemaType"?,"references"?,"schema","deleted"} (null: hard-deleted)
  CONFIG  {"keytype":"CONFIG","subject":S|null,"magic":0} -> {"compatibilityLevel":L} (null: removed)
  MODE    {"keytype":"MODE","subject":S|null,"magic":0} -> {"mode":M} (null: removed)
  DELETE_SUBJECT / CLEAR_SUBJECT {"keytype":..,"subject":S,"magic":0} -> {"subject":S,"version":V}
  NOOP    {"keytype":"NOOP","magic":0} -> null, or (kproto) {"maxId": N}: the highest id handed out
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

import trio


@dataclass
class Version:
    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: list = field(default_factory=list)
    deleted: bool = False

    def value(self) -> dict:
        out = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = self.references
        out["schema"] = self.schema
        out["deleted"] = self.deleted
        return out


def schema_key(subject: str, version: int) -> dict:
    return {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}


def config_key(subject: str | None) -> dict:
    return {"keytype": "CONFIG", "subject": subject, "magic": 0}


def mode_key(subject: str | None) -> dict:
    return {"keytype": "MODE", "subject": subject, "magic": 0}


def ref_key(refs) -> tuple:
    return tuple((r.get("name"), r.get("subject"), r.get("version")) for r in refs or [])


class Store:
    def __init__(self):
        self.subjects: dict[str, dict[int, Version]] = {}
        self.by_id: dict[int, Version] = {}   # the first version registered with each id
        self.ids: dict[tuple, int] = {}   # (type, identity, references) -> id
        self.identity_of: dict[int, str] = {}
        self.max_id = 0
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.applied = -1   # offset of the last record applied
        self._waiters: list[tuple[int, trio.Event]] = []
        # versions whose schema has not been parsed for its identity yet: the registry parses them
        # in worker threads (Registry.identify) before the reader's position moves past them
        self.unidentified: collections.deque[Version] = collections.deque()

    # -- applying records -----------------------------------------------------------------

    def apply(self, key, value, offset: int) -> None:
        kind = (key or {}).get("keytype")
        if kind == "SCHEMA":
            self._apply_schema(key, value)
        elif kind == "CONFIG":
            self._setting(self.configs, key.get("subject"), (value or {}).get("compatibilityLevel"))
        elif kind == "MODE":
            self._setting(self.modes, key.get("subject"), (value or {}).get("mode"))
        elif kind == "NOOP" and isinstance(value, dict):
            # kproto's NOOP records carry the highest id handed out: compaction keeps the last one,
            # so a hard-deleted schema's id is not handed out again once its records are cleaned
            self.max_id = max(self.max_id, int(value.get("maxId") or 0))
        elif kind in ("DELETE_SUBJECT", "CLEAR_SUBJECT") and value is not None:
            subject, upto = value.get("subject"), value.get("version", 0)
            for v in list(self.subjects.get(subject, {}).values()):
                if v.version <= upto:
                    if kind == "DELETE_SUBJECT":
                        v.deleted = True
                    else:
                        self.subjects[subject].pop(v.version, None)
        # (the position moves in advance(), once the reader's batch is applied and identified)

    def advance(self, next_offset: int) -> None:
        """The reader is at next_offset: every offset before it is applied (or was compacted away)."""
        self.applied = max(self.applied, next_offset - 1)
        still = []
        for at, event in self._waiters:
            if at <= self.applied:
                event.set()
            else:
                still.append((at, event))
        self._waiters = still

    @staticmethod
    def _setting(table: dict, subject, level) -> None:
        if level is None:
            table.pop(subject, None)
        else:
            table[subject] = level

    def _apply_schema(self, key, value) -> None:
        subject, version = key.get("subject"), key.get("version")
        versions = self.subjects.setdefault(subject, {})
        if value is None:
            versions.pop(version, None)
            if not versions:
                del self.subjects[subject]
            return
        v = Version(subject, version, int(value["id"]), value.get("schemaType") or "AVRO", value["schema"],
                    list(value.get("references") or []), bool(value.get("deleted")))
        versions[version] = v
        self.max_id = max(self.max_id, v.id)
        if v.id not in self.by_id:
            self.by_id[v.id] = v
        if v.id not in self.identity_of:
            self.unidentified.append(v)

    def identify(self, v: Version, ident: str) -> None:
        """v's schema parsed: same schema, same id (the writer looks ids up here)."""
        if v.id not in self.identity_of:
            self.identity_of[v.id] = ident
            self.ids.setdefault((v.schema_type, ident, ref_key(v.references)), v.id)

    async def wait_applied(self, offset: int) -> None:
        if offset <= self.applied:
            return
        event = trio.Event()
        self._waiters.append((offset, event))
        await event.wait()

    # -- queries --------------------------------------------------------------------------

    def versions(self, subject: str, deleted: bool = False) -> list[Version]:
        return [v for _n, v in sorted(self.subjects.get(subject, {}).items()) if deleted or not v.deleted]

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(s for s in self.subjects if self.versions(s, deleted))

    def next_version(self, subject: str) -> int:
        return max(self.subjects.get(subject, {}) or [0]) + 1

    def referenced_by(self, subject: str, version: int) -> list[int]:
        out = set()
        for versions in self.subjects.values():
            for v in versions.values():
                if not v.deleted and any(r.get("subject") == subject and r.get("version") == version
                                         for r in v.references):
                    out.add(v.id)
        return sorted(out)

    def subjects_of_id(self, schema_id: int, deleted: bool = False) -> list[tuple[str, int]]:
        return sorted((v.subject, v.version) for versions in self.subjects.values() for v in versions.values()
                      if v.id == schema_id and (deleted or not v.deleted))
