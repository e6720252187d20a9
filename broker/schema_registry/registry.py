"""What each REST call does, over the Store and the `_schemas` topic:
validation, compatibility, id and version choice, the record to write.
Reads are answered from this node's store; writes run only on the writer
node (the app forwards them there), one at a time."""
from __future__ import annotations

import dataclasses
import logging

import trio

from broker.schema_registry import budget, compatibility, errors, offload, schemas
from broker.schema_registry.store import Store, Version, config_key, mode_key, ref_key, schema_key

log = logging.getLogger("kproto.schema_registry")

MODES = ("READWRITE", "READONLY", "IMPORT")
NOOP_KEY = {"keytype": "NOOP", "magic": 0}
MAX_VERSION = 2 ** 31 - 1


class Registry:
    def __init__(self, topic, default_level: str = compatibility.DEFAULT_LEVEL, metrics=None):
        self.topic = topic
        self.store = Store()
        self.default_level = default_level
        self._parsed: dict[int, schemas.ParsedSchema] = {}
        # what this node (the writer) parsed for a registration, by (type, stored text, references):
        # its record, read back, needs no second parse
        self._fresh: dict[tuple, schemas.ParsedSchema] = {}
        self._write_lock = trio.Lock()
        self.is_writer = lambda: True    # replaced by the election in a cluster
        self.writer_generation = lambda: 0
        self._synced_generation = None
        self.metrics = metrics
        self.check_budget_s: float | None = budget.DEFAULT_MS / 1000   # one compatibility check's time budget
        self.ready = trio.Event()   # set once the store has read `_schemas` to its end

    # -- parsing stored versions ------------------------------------------------------------

    async def identify(self) -> None:
        """Parse the versions the reader has just applied, in worker threads (offload), oldest
        first (a reference is to an earlier version), and record their identities. The reader
        calls this before it moves its position, so a write waiting for its offset, and the
        registry's first answer after a restart, find every schema identified; and a restart
        with large schemas stored does not stall the event loop the Kafka listeners share."""
        while self.store.unidentified:
            v = self.store.unidentified.popleft()
            if v.id in self.store.identity_of:
                continue
            p = self._parsed.get(v.id) or self._fresh.pop((v.schema_type, v.schema, ref_key(v.references)), None)
            if p is None:
                try:
                    resolved = await self._resolve_async(v.references)
                    p = await offload.run(schemas.parse, v.schema_type, v.schema, resolved)
                except Exception as exc:   # (a record this node's libraries cannot parse: exact text only)
                    log.warning("schema %d (%s version %d) does not parse here: %s", v.id, v.subject, v.version,
                                exc)
                    self.store.identify(v, v.schema)
                    continue
            self._parsed.setdefault(v.id, p)
            self.store.identify(v, p.identity)

    async def _resolve_async(self, refs, depth: int = 0) -> dict:
        """_resolve, once the referenced versions not parsed yet are parsed in worker threads."""
        if depth > 32:
            raise errors.invalid_schema("references nest deeper than 32 levels")
        for r in refs or []:
            if isinstance(r, dict) and isinstance(r.get("subject"), str):   # (else _resolve says what is wrong)
                version = r.get("version")
                target = self._version(r["subject"], version if version not in (None, -1) else "latest", True,
                                       missing_ok=True)
                if target is not None and target.id not in self._parsed:
                    self._parsed.setdefault(target.id, await offload.run(
                        schemas.parse, target.schema_type, target.schema,
                        await self._resolve_async(target.references, depth + 1)))
        return self._resolve(refs, depth=depth)

    async def parsed_all(self, versions: list[Version]) -> list[schemas.ParsedSchema]:
        """Each version's parsed schema, the ones not parsed yet parsed in worker threads."""
        for v in versions:
            if v.id not in self._parsed:
                self._parsed.setdefault(v.id, await offload.run(schemas.parse, v.schema_type, v.schema,
                                                                await self._resolve_async(v.references)))
        return [self.parsed(v) for v in versions]

    def parsed(self, v: Version) -> schemas.ParsedSchema:
        p = self._parsed.get(v.id)
        if p is None:
            resolved = self._resolve(v.references)
            p = self._parsed[v.id] = schemas.parse(v.schema_type, v.schema, resolved)
        if getattr(p, "version", None) != v.version:
            p = dataclasses.replace(p)   # (one parse per id; the version label is this subject's)
            p.version = v.version
        return p

    def _resolve(self, refs, out: dict | None = None, depth: int = 0) -> dict:
        """The referenced schemas, transitively, dependencies first (by reference name)."""
        out = {} if out is None else out
        if depth > 32:
            raise errors.invalid_schema("references nest deeper than 32 levels")
        for r in refs or []:
            if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not isinstance(r.get("subject"), str):
                raise errors.unprocessable("A reference needs a name, a subject and a version")
            version = r.get("version")
            target = self._version(r["subject"], version if version not in (None, -1) else "latest", True,
                                   missing_ok=True)
            if target is None:
                raise errors.invalid_schema(f"No schema reference found for subject \"{r['subject']}\" and "
                                            f"version {version}")
            self._resolve(target.references, out, depth + 1)
            out[r["name"]] = self.parsed(target)
        return out

    # -- reads -----------------------------------------------------------------------------

    def _version(self, subject: str, version, deleted: bool = False, missing_ok: bool = False) -> Version | None:
        number = parse_version(version)
        versions = self.store.versions(subject, deleted=True)
        if not versions or (not deleted and not self.store.versions(subject)):
            if missing_ok:
                return None
            raise errors.subject_not_found(subject)
        if number == -1:
            live = [v for v in versions if deleted or not v.deleted]
            return live[-1]
        v = self.store.subjects.get(subject, {}).get(number)
        if v is None or (v.deleted and not deleted):
            if missing_ok:
                return None
            raise errors.version_not_found(number)
        return v

    def get_version(self, subject: str, version, deleted: bool = False) -> Version:
        return self._version(subject, version, deleted)

    def version_body(self, v: Version, fmt: str | None = None) -> dict:
        out = {"subject": v.subject, "version": v.version, "id": v.id}
        if v.schema_type != "AVRO":
            out["schemaType"] = v.schema_type
        if v.references:
            out["references"] = v.references
        out["schema"] = self.render(v, fmt)
        return out

    def render(self, v: Version, fmt: str | None = None) -> str:
        """The schema text as asked for: a Protobuf schema as .proto text by default (as Confluent
        answers, whichever form it was registered in), as a base64 descriptor for format=serialized."""
        if v.schema_type != "PROTOBUF":
            return v.schema
        from broker.schema_registry import protobuf_text
        model = self.parsed(v).parsed
        try:
            if fmt == "serialized":
                if model.descriptor is not None:
                    return v.schema
                return protobuf_text.serialized(schemas._parse_proto_text(v.schema), f"{v.subject}.proto")
            if model.descriptor is not None:
                return protobuf_text.text_from_descriptor(model.descriptor)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("schema %d: cannot convert to the %s form: %s", v.id, fmt or "text", exc)
        return v.schema

    def schema_by_id(self, schema_id: int) -> Version:
        v = self.store.by_id.get(schema_id)
        if v is None:
            raise errors.schema_not_found(f"Schema {schema_id} not found")
        return v

    def list_versions(self, subject: str, deleted: bool = False) -> list[int]:
        versions = self.store.versions(subject, deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        return [v.version for v in versions]

    def level(self, subject: str | None) -> str:
        return self.store.configs.get(subject) or self.store.configs.get(None) or self.default_level

    def mode(self, subject: str | None) -> str:
        return self.store.modes.get(subject) or self.store.modes.get(None) or "READWRITE"

    async def _new_schema(self, body: dict, normalize: bool) -> schemas.ParsedSchema:
        """Validated and resolved here; parsed in a worker thread (offload)."""
        if not isinstance(body, dict):
            raise errors.unprocessable("The request body must be a JSON object")
        text = body.get("schema")
        if not isinstance(text, str):
            raise errors.unprocessable("Empty schema") if text is None else errors.invalid_schema(str(text))
        schema_type = schemas.check_type(body.get("schemaType"))
        refs = body.get("references") or []
        if not isinstance(refs, list):
            raise errors.unprocessable("references must be a list")
        parsed = await offload.run(schemas.parse, schema_type, text, await self._resolve_async(refs), normalize)
        parsed.references = [{"name": r["name"], "subject": r["subject"], "version": r.get("version")}
                             for r in refs]
        return parsed

    async def lookup(self, subject: str, body: dict, normalize: bool = False, deleted: bool = False) -> dict:
        versions = self.store.versions(subject, deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        new = await self._new_schema(body, normalize)
        await self.parsed_all(self.store.versions(subject, deleted))
        versions = self.store.versions(subject, deleted)   # (as they are now, after the parse)
        for v in reversed(versions):
            if (v.schema_type == new.schema_type and ref_key(v.references) == ref_key(new.references)
                    and self.parsed(v).identity == new.identity):
                return self.version_body(v)
        raise errors.schema_not_found("Schema not found")

    async def check_compatibility(self, subject: str, body: dict, version=None, normalize: bool = False) -> list[str]:
        new = await self._new_schema(body, normalize)
        level = self.level(subject)
        if version is None:
            previous = await self.parsed_all(self.store.versions(subject))
        else:
            previous = await self.parsed_all([self._version(subject, version)])
            level = level.replace("_TRANSITIVE", "")
        return await offload.run(compatibility.check, level, new, previous, self.check_budget_s)

    # -- writes (on the writer node) --------------------------------------------------------

    async def _sync(self) -> None:
        """A new writer first reads everything the previous one wrote (ids are never reused)."""
        generation = self.writer_generation()
        if self._synced_generation != generation:
            try:
                end = await self.topic.end_offset()
            except OSError as exc:
                raise errors.store_error(str(exc)) from None
            with trio.move_on_after(30) as scope:
                await self.store.wait_applied(end - 1)
            if scope.cancelled_caught:
                raise errors.operation_timeout("this node has not read _schemas to its end")
            self._synced_generation = generation

    async def _write(self, key: dict, value) -> None:
        await self._write_all([(key, value)])

    async def _write_all(self, pairs: list) -> None:
        """One batch: a subject's versions go (or stay) together."""
        try:
            offset = await self.topic.append_all(pairs)
        except OSError as exc:
            raise errors.store_error(str(exc)) from None
        with trio.move_on_after(30) as scope:
            await self.store.wait_applied(offset)
        if scope.cancelled_caught:
            raise errors.operation_timeout("the write was not read back in time")

    async def register(self, subject: str, body: dict, normalize: bool = False) -> dict:
        async with self._write_lock:
            await self._sync()
            return await self._register(subject, body, normalize)

    async def _register(self, subject: str, body: dict, normalize: bool) -> dict:
        if not isinstance(body, dict):
            raise errors.unprocessable("The request body must be a JSON object")
        mode = self.mode(subject)
        wanted_id, wanted_version = body.get("id"), body.get("version")
        if mode == "READONLY":
            raise errors.operation_not_permitted(f"Subject {subject} is in read-only mode")
        if wanted_id is not None and mode != "IMPORT":
            raise errors.operation_not_permitted(f"Subject {subject} is not in import mode")
        if wanted_id is not None and (not isinstance(wanted_id, int) or isinstance(wanted_id, bool) or wanted_id < 1):
            raise errors.unprocessable(f"Invalid schema id {wanted_id}")
        new = await self._new_schema(body, normalize)
        key = (new.schema_type, new.identity, ref_key(new.references))
        live = self.store.versions(subject)
        await self.parsed_all(live)
        for v in live:
            if v.schema_type == new.schema_type and ref_key(v.references) == key[2] \
                    and self.parsed(v).identity == new.identity:
                if wanted_id is not None and wanted_id != v.id:
                    raise errors.operation_not_permitted(
                        f"Overwrite new schema with id {wanted_id} is not permitted.")
                return {"id": v.id}
        if mode != "IMPORT":
            messages = await offload.run(compatibility.check, self.level(subject), new,
                                         [self.parsed(v) for v in live], self.check_budget_s)
            if messages:
                raise errors.incompatible(subject, messages)
        if wanted_id is not None:
            existing = self.store.by_id.get(wanted_id)
            if existing is not None and self.store.identity_of.get(wanted_id) != new.identity:
                raise errors.operation_not_permitted(f"Overwrite new schema with id {wanted_id} is not permitted.")
            schema_id = wanted_id
        else:
            schema_id = self.store.ids.get(key) or self.store.max_id + 1
        if wanted_version is not None and mode == "IMPORT":
            version = parse_version(wanted_version)
            if version == -1 or version in self.store.subjects.get(subject, {}):
                raise errors.invalid_version(wanted_version)
        else:
            version = self.store.next_version(subject)
        v = Version(subject, version, schema_id, new.schema_type, new.text, new.references)
        fresh = (v.schema_type, v.schema, ref_key(v.references))
        self._fresh[fresh] = new
        try:
            await self._write(schema_key(subject, version), v.value())
        finally:
            self._fresh.pop(fresh, None)
        if self.metrics is not None:
            self.metrics.registrations += 1
        return {"id": schema_id}

    async def delete_version(self, subject: str, version, permanent: bool = False) -> int:
        async with self._write_lock:
            await self._sync()
            if self.mode(subject) == "READONLY":
                raise errors.operation_not_permitted(f"Subject {subject} is in read-only mode")
            v = self._version(subject, version, deleted=True)
            if v.deleted and not permanent:
                raise errors.version_soft_deleted(subject, v.version)
            if permanent and not v.deleted:
                raise errors.version_not_soft_deleted(subject, v.version)
            users = self.store.referenced_by(subject, v.version)
            if users:
                raise errors.reference_exists(f"{{magic=1,keytype=SCHEMA,subject={subject},version={v.version}}}")
            if permanent:
                await self._write_all([(schema_key(subject, v.version), None),
                                       (NOOP_KEY, {"maxId": self.store.max_id})])
            else:
                v2 = Version(v.subject, v.version, v.id, v.schema_type, v.schema, v.references, True)
                await self._write(schema_key(subject, v.version), v2.value())
            return v.version

    async def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        async with self._write_lock:
            await self._sync()
            every = self.store.versions(subject, deleted=True)
            if not every:
                raise errors.subject_not_found(subject)
            live = [v for v in every if not v.deleted]
            if self.mode(subject) == "READONLY":
                raise errors.operation_not_permitted(f"Subject {subject} is in read-only mode")
            if not permanent and not live:
                raise errors.subject_soft_deleted(subject)
            if permanent and live:
                raise errors.subject_not_soft_deleted(subject)
            for v in every:
                if self.store.referenced_by(subject, v.version):
                    raise errors.reference_exists(
                        f"{{magic=1,keytype=SCHEMA,subject={subject},version={v.version}}}")
            pairs = [(NOOP_KEY, {"maxId": self.store.max_id})] if permanent else []
            for v in every:
                if permanent:
                    pairs.append((schema_key(subject, v.version), None))
                elif not v.deleted:
                    v2 = Version(v.subject, v.version, v.id, v.schema_type, v.schema, v.references, True)
                    pairs.append((schema_key(subject, v.version), v2.value()))
            await self._write_all(pairs)
            return [v.version for v in (every if permanent else live)]

    async def set_config(self, subject: str | None, body) -> dict:
        level = body.get("compatibility") if isinstance(body, dict) else None
        if not isinstance(level, str) or level.upper() not in compatibility.LEVELS:
            raise errors.invalid_compatibility_level()
        async with self._write_lock:
            await self._write(config_key(subject), {"compatibilityLevel": level.upper()})
        return {"compatibility": level.upper()}

    async def delete_config(self, subject: str | None) -> dict:
        async with self._write_lock:
            previous = self.store.configs.get(subject)
            if previous is None:
                if subject is not None and not self.store.versions(subject, deleted=True):
                    raise errors.subject_not_found(subject)
                previous = self.level(subject)
            else:
                await self._write(config_key(subject), None)
        return {"compatibilityLevel": previous}

    async def set_mode(self, subject: str | None, body, force: bool = False) -> dict:
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode(mode)
        mode = mode.upper()
        async with self._write_lock:
            await self._sync()
            if mode == "IMPORT" and not force:
                existing = self.store.versions(subject, True) if subject is not None else self.store.subject_names(True)
                if existing:
                    raise errors.operation_not_permitted("Cannot import since found existing subjects")
            await self._write(mode_key(subject), {"mode": mode})
        return {"mode": mode}

    async def delete_mode(self, subject: str) -> dict:
        async with self._write_lock:
            previous = self.store.modes.get(subject)
            if previous is None:
                raise errors.subject_level_mode_not_configured(subject)
            await self._write(mode_key(subject), None)
        return {"mode": previous}


def parse_version(version) -> int:
    """'latest' and -1 -> -1; an int in [1, 2^31-1]; else 42202."""
    if version == "latest" or version == -1 or version == "-1":
        return -1
    try:
        number = int(version)
    except (TypeError, ValueError):
        raise errors.invalid_version(version) from None
    if isinstance(version, bool) or not 1 <= number <= MAX_VERSION:
        raise errors.invalid_version(version)
    return number
