"""Subject ACLs: with an authorizer (`authorizer.class.name`) and basic authentication
(`schema.registry.authentication=basic`), each request is checked against the cluster's own Kafka
ACLs, so one `kafka-acls.sh` grants both the topic and its schemas, in the way of the topic-ACL
mode of Confluent's security plugin:

- a subject stands for a topic: `T-key` and `T-value` (TopicNameStrategy) for topic `T`, any other
  subject (RecordNameStrategy and the rest) for a topic named as the subject itself, which a
  PREFIXED ACL covers;
- reading a subject (its versions, schemas, config, mode; a lookup or a compatibility check) needs
  READ on that topic, registering a schema WRITE, setting or deleting its config or mode
  ALTER_CONFIGS, deleting a version or the subject DELETE;
- the global config and mode need ALTER_CONFIGS on the cluster to change;
- `GET /subjects` lists only the subjects the user may read; a schema by id stays readable by any
  authenticated user, as deserializers look schemas up by id alone.

A refusal is Confluent's 403 body, `{"error_code": 40301, "message": "User is denied operation
... on Subject: ..."}`. Super users (`super.users`) pass; `allow.everyone.if.no.acl.found` applies
as for Kafka requests."""
from __future__ import annotations

from broker.schema_registry import errors
from broker.security.acls import CLUSTER, CLUSTER_NAME, OPS, TOPIC

READ, WRITE, DELETE, ALTER_CONFIGS = OPS["READ"], OPS["WRITE"], OPS["DELETE"], OPS["ALTER_CONFIGS"]
OP_WORDS = {READ: "Read", WRITE: "Write", DELETE: "Delete", ALTER_CONFIGS: "AlterConfigs"}
# handlers (broker/schema_registry/app.py) that change a subject's settings
_SETTINGS = {"put_config", "delete_config", "put_mode", "delete_mode"}
_DELETES = {"delete_version", "delete_subject"}


def subject_topic(subject: str) -> str:
    for suffix in ("-key", "-value"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return subject


def operation(handler: str, method: str) -> int:
    if handler in _DELETES:
        return DELETE
    if handler in _SETTINGS:
        return ALTER_CONFIGS
    if handler == "register":
        return WRITE
    return READ


class SubjectAcls:
    """Wraps the basic authentication (callable(headers) -> user) with authorize()."""

    def __init__(self, broker, authenticate):
        self.broker = broker
        self.authenticate = authenticate

    def __call__(self, headers: dict) -> str:
        return self.authenticate(headers)

    def _authorizer(self):
        security = getattr(self.broker, "security", None)
        return getattr(security, "authorizer", None)

    def may(self, user: str, op: int, subject: str | None, host: str = "*") -> bool:
        authorizer = self._authorizer()
        if authorizer is None:
            return True
        principal = f"User:{user}"
        if subject is None:
            return authorizer.authorize(principal, host, op, CLUSTER, CLUSTER_NAME)
        return authorizer.authorize(principal, host, op, TOPIC, subject_topic(subject))

    def authorize(self, user: str, method: str, subject: str | None, handler: str = "", host: str = "*") -> None:
        """Raises 403 when `user` (connecting from `host`) may not run `handler` on `subject`."""
        if subject is None:
            if handler in _SETTINGS and not self.may(user, ALTER_CONFIGS, None, host):
                raise errors.forbidden("User is denied operation AlterConfigs on Cluster: kafka-cluster")
            return
        op = operation(handler, method)
        if not self.may(user, op, subject, host):
            raise errors.forbidden(f"User is denied operation {OP_WORDS[op]} on Subject: {subject}")

    def readable(self, user: str, subjects: list[str], host: str = "*") -> list[str]:
        return [s for s in subjects if self.may(user, READ, s, host)]
