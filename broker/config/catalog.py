"""Kafka 3.9's config definitions: every broker config DescribeConfigs lists, and the topic configs.

The broker table was generated once from what a Kafka 3.9 broker reported for itself (name, type,
built-in default, whether it is dynamically updatable) and the validators of Kafka's 3.9.0
ConfigDef definitions, then reviewed; it is plain data, edit it by hand. Defaults are the strings
Kafka reports (e.g. `log.dir` is Kafka's own `/tmp/kafka-logs`); None is a null default.
`listener.security.protocol.map`'s default is in the order Kafka prints it (a Java HashMap's).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from broker.config.types import ConfigType
from broker.config.validators import (
    CLEANUP_POLICIES, COMPRESSION_TYPES, TIMESTAMP_TYPES, at_least, between, gzip_level, list_of,
    metadata_version, non_empty_string, non_null, one_of, quorum_bootstrap_servers, quorum_voters,
    thread_pool_size, throttled_replicas,
)

Validator = Callable[[str, object], None]

BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = (
    ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT, ConfigType.LONG,
    ConfigType.DOUBLE, ConfigType.LIST, ConfigType.CLASS, ConfigType.PASSWORD)

GZIP_LEVEL = gzip_level
THREAD_POOL_SIZE = thread_pool_size
NON_EMPTY_STRING = non_empty_string
NON_NULL = non_null
METADATA_VERSION = metadata_version
QUORUM_VOTERS = quorum_voters
QUORUM_BOOTSTRAP_SERVERS = quorum_bootstrap_servers
THROTTLED_REPLICAS = throttled_replicas
GROUP_TYPES = list_of("consumer", "classic", "share", "unknown")
SECURITY_PROTOCOLS = one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SSL_CLIENT_AUTH = one_of("required", "requested", "none")

RO, DYN = False, True   # read-only (static) / dynamically updatable, as DescribeConfigs reports it


@dataclass(frozen=True, slots=True)
class BrokerConfigKey:
    """A broker config key: its type, Kafka's default, whether it is dynamic, its check."""
    name: str
    type: ConfigType
    default: str | None
    dynamic: bool
    validator: Validator | None = None

    @property
    def read_only(self) -> bool:
        return not self.dynamic

    @property
    def sensitive(self) -> bool:
        return self.type is ConfigType.PASSWORD


def _b(name, type_, default, dynamic, validator=None) -> BrokerConfigKey:
    return BrokerConfigKey(name, type_, default, dynamic, validator)


# Sorted by name: name, type, Kafka's default, dynamically updatable or read-only, validator.
BROKER_CONFIGS: dict[str, BrokerConfigKey] = {k.name: k for k in (
    _b("advertised.listeners", STRING, None, DYN),
    _b("alter.config.policy.class.name", CLASS, None, RO),
    _b("alter.log.dirs.replication.quota.window.num", INT, "11", RO, at_least(1)),
    _b("alter.log.dirs.replication.quota.window.size.seconds", INT, "1", RO, at_least(1)),
    _b("authorizer.class.name", STRING, "", RO, NON_NULL),
    _b("auto.create.topics.enable", BOOLEAN, "true", RO),
    _b("auto.include.jmx.reporter", BOOLEAN, "true", RO),
    _b("auto.leader.rebalance.enable", BOOLEAN, "true", RO),
    _b("background.threads", INT, "10", DYN, at_least(1)),
    _b("broker.heartbeat.interval.ms", INT, "2000", RO),
    _b("broker.id", INT, "-1", RO),
    _b("broker.id.generation.enable", BOOLEAN, "true", RO),
    _b("broker.rack", STRING, None, RO),
    _b("broker.session.timeout.ms", INT, "9000", RO),
    _b("client.quota.callback.class", CLASS, None, RO),
    _b("compression.gzip.level", INT, "-1", DYN, GZIP_LEVEL),
    _b("compression.lz4.level", INT, "9", DYN, between(1, 17)),
    _b("compression.type", STRING, "producer", DYN, COMPRESSION_TYPES),
    _b("compression.zstd.level", INT, "3", DYN, between(-131072, 22)),
    _b("connection.failed.authentication.delay.ms", INT, "100", RO, at_least(0)),
    _b("connections.max.idle.ms", LONG, "600000", RO),
    _b("connections.max.reauth.ms", LONG, "0", RO),
    _b("control.plane.listener.name", STRING, None, RO),
    _b("controlled.shutdown.enable", BOOLEAN, "true", RO),
    _b("controlled.shutdown.max.retries", INT, "3", RO),
    _b("controlled.shutdown.retry.backoff.ms", LONG, "5000", RO),
    _b("controller.listener.names", STRING, None, RO),
    _b("controller.quorum.append.linger.ms", INT, "25", RO),
    _b("controller.quorum.bootstrap.servers", LIST, "", RO, QUORUM_BOOTSTRAP_SERVERS),
    _b("controller.quorum.election.backoff.max.ms", INT, "1000", RO),
    _b("controller.quorum.election.timeout.ms", INT, "1000", RO),
    _b("controller.quorum.fetch.timeout.ms", INT, "2000", RO),
    _b("controller.quorum.request.timeout.ms", INT, "2000", RO),
    _b("controller.quorum.retry.backoff.ms", INT, "20", RO),
    _b("controller.quorum.voters", LIST, "", RO, QUORUM_VOTERS),
    _b("controller.quota.window.num", INT, "11", RO, at_least(1)),
    _b("controller.quota.window.size.seconds", INT, "1", RO, at_least(1)),
    _b("controller.socket.timeout.ms", INT, "30000", RO),
    _b("create.topic.policy.class.name", CLASS, None, RO),
    _b("default.replication.factor", INT, "1", RO),
    _b("delegation.token.expiry.check.interval.ms", LONG, "3600000", RO, at_least(1)),
    _b("delegation.token.expiry.time.ms", LONG, "86400000", RO, at_least(1)),
    _b("delegation.token.master.key", PASSWORD, None, RO),
    _b("delegation.token.max.lifetime.ms", LONG, "604800000", RO, at_least(1)),
    _b("delegation.token.secret.key", PASSWORD, None, RO),
    _b("delete.records.purgatory.purge.interval.requests", INT, "1", RO),
    _b("delete.topic.enable", BOOLEAN, "true", RO),
    _b("early.start.listeners", STRING, None, RO),
    _b("eligible.leader.replicas.enable", BOOLEAN, "false", RO),
    _b("fetch.max.bytes", INT, "57671680", RO, at_least(1024)),
    _b("fetch.purgatory.purge.interval.requests", INT, "1000", RO),
    _b("group.consumer.assignors", LIST,
       "org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
       "org.apache.kafka.coordinator.group.assignor.RangeAssignor", RO),
    _b("group.consumer.heartbeat.interval.ms", INT, "5000", RO, at_least(1)),
    _b("group.consumer.max.heartbeat.interval.ms", INT, "15000", RO, at_least(1)),
    _b("group.consumer.max.session.timeout.ms", INT, "60000", RO, at_least(1)),
    _b("group.consumer.max.size", INT, "2147483647", RO, at_least(1)),
    _b("group.consumer.min.heartbeat.interval.ms", INT, "5000", RO, at_least(1)),
    _b("group.consumer.min.session.timeout.ms", INT, "45000", RO, at_least(1)),
    _b("group.consumer.session.timeout.ms", INT, "45000", RO, at_least(1)),
    _b("group.coordinator.append.linger.ms", INT, "10", RO, at_least(0)),
    _b("group.coordinator.rebalance.protocols", LIST, "classic", RO, GROUP_TYPES),
    _b("group.coordinator.threads", INT, "1", RO, at_least(1)),
    _b("group.initial.rebalance.delay.ms", INT, "3000", RO),
    _b("group.max.session.timeout.ms", INT, "1800000", RO),
    _b("group.max.size", INT, "2147483647", RO, at_least(1)),
    _b("group.min.session.timeout.ms", INT, "6000", RO),
    _b("group.share.delivery.count.limit", INT, "5", RO, between(2, 10)),
    _b("group.share.heartbeat.interval.ms", INT, "5000", RO, at_least(1)),
    _b("group.share.max.groups", SHORT, "10", RO, between(1, 100)),
    _b("group.share.max.heartbeat.interval.ms", INT, "15000", RO, at_least(1)),
    _b("group.share.max.record.lock.duration.ms", INT, "60000", RO, between(30000, 3600000)),
    _b("group.share.max.session.timeout.ms", INT, "60000", RO, at_least(1)),
    _b("group.share.max.size", SHORT, "200", RO, between(10, 1000)),
    _b("group.share.min.heartbeat.interval.ms", INT, "5000", RO, at_least(1)),
    _b("group.share.min.record.lock.duration.ms", INT, "15000", RO, between(1000, 30000)),
    _b("group.share.min.session.timeout.ms", INT, "45000", RO, at_least(1)),
    _b("group.share.partition.max.record.locks", INT, "200", RO, between(100, 10000)),
    _b("group.share.record.lock.duration.ms", INT, "30000", RO, between(1000, 60000)),
    _b("group.share.session.timeout.ms", INT, "45000", RO, at_least(1)),
    _b("initial.broker.registration.timeout.ms", INT, "60000", RO),
    _b("inter.broker.listener.name", STRING, None, RO),
    _b("inter.broker.protocol.version", STRING, "3.9-IV0", RO, METADATA_VERSION),
    _b("kafka.metrics.polling.interval.secs", INT, "10", RO, at_least(1)),
    _b("kafka.metrics.reporters", LIST, "", RO),
    _b("leader.imbalance.check.interval.seconds", LONG, "300", RO, at_least(1)),
    _b("leader.imbalance.per.broker.percentage", INT, "10", RO),
    _b("listener.security.protocol.map", STRING,
       "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT", DYN),
    _b("listeners", STRING, "PLAINTEXT://:9092", DYN),
    _b("log.cleaner.backoff.ms", LONG, "15000", DYN, at_least(0)),
    _b("log.cleaner.dedupe.buffer.size", LONG, "134217728", DYN),
    _b("log.cleaner.delete.retention.ms", LONG, "86400000", DYN, at_least(0)),
    _b("log.cleaner.enable", BOOLEAN, "true", RO),
    _b("log.cleaner.io.buffer.load.factor", DOUBLE, "0.9", DYN),
    _b("log.cleaner.io.buffer.size", INT, "524288", DYN, at_least(0)),
    _b("log.cleaner.io.max.bytes.per.second", DOUBLE, "1.7976931348623157E308", DYN),
    _b("log.cleaner.max.compaction.lag.ms", LONG, "9223372036854775807", DYN, at_least(1)),
    _b("log.cleaner.min.cleanable.ratio", DOUBLE, "0.5", DYN, between(0, 1)),
    _b("log.cleaner.min.compaction.lag.ms", LONG, "0", DYN, at_least(0)),
    _b("log.cleaner.threads", INT, "1", DYN, at_least(0)),
    _b("log.cleanup.policy", LIST, "delete", DYN, CLEANUP_POLICIES),
    _b("log.dir", STRING, "/tmp/kafka-logs", RO),
    _b("log.dir.failure.timeout.ms", LONG, "30000", RO, at_least(1)),
    _b("log.dirs", STRING, None, RO),
    _b("log.flush.interval.messages", LONG, "9223372036854775807", DYN, at_least(1)),
    _b("log.flush.interval.ms", LONG, None, DYN),
    _b("log.flush.offset.checkpoint.interval.ms", INT, "60000", RO, at_least(0)),
    _b("log.flush.scheduler.interval.ms", LONG, "9223372036854775807", RO),
    _b("log.flush.start.offset.checkpoint.interval.ms", INT, "60000", RO, at_least(0)),
    _b("log.index.interval.bytes", INT, "4096", DYN, at_least(0)),
    _b("log.index.size.max.bytes", INT, "10485760", DYN, at_least(4)),
    _b("log.local.retention.bytes", LONG, "-2", DYN, at_least(-2)),
    _b("log.local.retention.ms", LONG, "-2", DYN, at_least(-2)),
    _b("log.message.downconversion.enable", BOOLEAN, "true", DYN),
    _b("log.message.format.version", STRING, "3.0-IV1", RO, METADATA_VERSION),
    _b("log.message.timestamp.after.max.ms", LONG, "9223372036854775807", DYN, at_least(0)),
    _b("log.message.timestamp.before.max.ms", LONG, "9223372036854775807", DYN, at_least(0)),
    _b("log.message.timestamp.difference.max.ms", LONG, "9223372036854775807", DYN, at_least(0)),
    _b("log.message.timestamp.type", STRING, "CreateTime", DYN, TIMESTAMP_TYPES),
    _b("log.preallocate", BOOLEAN, "false", DYN),
    _b("log.retention.bytes", LONG, "-1", DYN),
    _b("log.retention.check.interval.ms", LONG, "300000", RO, at_least(1)),
    _b("log.retention.hours", INT, "168", RO),
    _b("log.retention.minutes", INT, None, RO),
    _b("log.retention.ms", LONG, None, DYN),
    _b("log.roll.hours", INT, "168", RO, at_least(1)),
    _b("log.roll.jitter.hours", INT, "0", RO, at_least(0)),
    _b("log.roll.jitter.ms", LONG, None, DYN),
    _b("log.roll.ms", LONG, None, DYN),
    _b("log.segment.bytes", INT, "1073741824", DYN, at_least(14)),
    _b("log.segment.delete.delay.ms", LONG, "60000", DYN, at_least(0)),
    _b("max.connection.creation.rate", INT, "2147483647", DYN, at_least(0)),
    _b("max.connections", INT, "2147483647", DYN, at_least(0)),
    _b("max.connections.per.ip", INT, "2147483647", DYN, at_least(0)),
    _b("max.connections.per.ip.overrides", STRING, "", DYN),
    _b("max.incremental.fetch.session.cache.slots", INT, "1000", RO, at_least(0)),
    _b("max.request.partition.size.limit", INT, "2000", RO, at_least(1)),
    _b("message.max.bytes", INT, "1048588", DYN, at_least(0)),
    _b("metadata.log.dir", STRING, None, RO),
    _b("metadata.log.max.record.bytes.between.snapshots", LONG, "20971520", RO, at_least(1)),
    _b("metadata.log.max.snapshot.interval.ms", LONG, "3600000", RO, at_least(0)),
    _b("metadata.log.segment.bytes", INT, "1073741824", RO, at_least(12)),
    _b("metadata.log.segment.ms", LONG, "604800000", RO),
    _b("metadata.max.idle.interval.ms", INT, "500", RO, at_least(0)),
    _b("metadata.max.retention.bytes", LONG, "104857600", RO),
    _b("metadata.max.retention.ms", LONG, "604800000", RO),
    _b("metric.reporters", LIST, "", DYN),
    _b("metrics.num.samples", INT, "2", RO, at_least(1)),
    _b("metrics.recording.level", STRING, "INFO", RO),
    _b("metrics.sample.window.ms", LONG, "30000", RO, at_least(1)),
    _b("min.insync.replicas", INT, "1", DYN, at_least(1)),
    _b("node.id", INT, "-1", RO),
    _b("num.io.threads", INT, "8", DYN, at_least(1)),
    _b("num.network.threads", INT, "3", DYN, at_least(1)),
    _b("num.partitions", INT, "1", RO, at_least(1)),
    _b("num.recovery.threads.per.data.dir", INT, "1", DYN, at_least(1)),
    _b("num.replica.alter.log.dirs.threads", INT, None, RO),
    _b("num.replica.fetchers", INT, "1", DYN),
    _b("offset.metadata.max.bytes", INT, "4096", RO),
    _b("offsets.commit.required.acks", SHORT, "-1", RO),
    _b("offsets.commit.timeout.ms", INT, "5000", RO, at_least(1)),
    _b("offsets.load.buffer.size", INT, "5242880", RO, at_least(1)),
    _b("offsets.retention.check.interval.ms", LONG, "600000", RO, at_least(1)),
    _b("offsets.retention.minutes", INT, "10080", RO, at_least(1)),
    _b("offsets.topic.compression.codec", INT, "0", RO),
    _b("offsets.topic.num.partitions", INT, "50", RO, at_least(1)),
    _b("offsets.topic.replication.factor", SHORT, "3", RO, at_least(1)),
    _b("offsets.topic.segment.bytes", INT, "104857600", RO, at_least(1)),
    _b("password.encoder.cipher.algorithm", STRING, "AES/CBC/PKCS5Padding", RO),
    _b("password.encoder.iterations", INT, "4096", RO, at_least(1024)),
    _b("password.encoder.key.length", INT, "128", RO, at_least(8)),
    _b("password.encoder.keyfactory.algorithm", STRING, None, RO),
    _b("password.encoder.old.secret", PASSWORD, None, RO),
    _b("password.encoder.secret", PASSWORD, None, RO),
    _b("principal.builder.class", CLASS,
       "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder", DYN),
    _b("process.roles", LIST, "", RO, list_of("broker", "controller")),
    _b("producer.id.expiration.ms", INT, "86400000", DYN, at_least(1)),
    _b("producer.purgatory.purge.interval.requests", INT, "1000", RO),
    _b("queued.max.request.bytes", LONG, "-1", RO),
    _b("queued.max.requests", INT, "500", RO, at_least(1)),
    _b("quota.window.num", INT, "11", RO, at_least(1)),
    _b("quota.window.size.seconds", INT, "1", RO, at_least(1)),
    _b("remote.fetch.max.wait.ms", INT, "500", DYN, at_least(1)),
    _b("remote.log.index.file.cache.total.size.bytes", LONG, "1073741824", DYN, at_least(1)),
    _b("remote.log.manager.copier.thread.pool.size", INT, "-1", RO, THREAD_POOL_SIZE),
    _b("remote.log.manager.copy.max.bytes.per.second", LONG, "9223372036854775807", DYN, at_least(1)),
    _b("remote.log.manager.copy.quota.window.num", INT, "11", RO, at_least(1)),
    _b("remote.log.manager.copy.quota.window.size.seconds", INT, "1", RO, at_least(1)),
    _b("remote.log.manager.expiration.thread.pool.size", INT, "-1", RO, THREAD_POOL_SIZE),
    _b("remote.log.manager.fetch.max.bytes.per.second", LONG, "9223372036854775807", DYN, at_least(1)),
    _b("remote.log.manager.fetch.quota.window.num", INT, "11", RO, at_least(1)),
    _b("remote.log.manager.fetch.quota.window.size.seconds", INT, "1", RO, at_least(1)),
    _b("remote.log.manager.task.interval.ms", LONG, "30000", RO, at_least(1)),
    _b("remote.log.manager.thread.pool.size", INT, "10", RO, at_least(1)),
    _b("remote.log.metadata.custom.metadata.max.bytes", INT, "128", RO, at_least(0)),
    _b("remote.log.metadata.manager.class.name", STRING,
       "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager", RO,
       NON_EMPTY_STRING),
    _b("remote.log.metadata.manager.class.path", STRING, None, RO),
    _b("remote.log.metadata.manager.impl.prefix", STRING, "rlmm.config.", RO, NON_EMPTY_STRING),
    _b("remote.log.metadata.manager.listener.name", STRING, None, RO, NON_EMPTY_STRING),
    _b("remote.log.reader.max.pending.tasks", INT, "100", RO, at_least(1)),
    _b("remote.log.reader.threads", INT, "10", RO, at_least(1)),
    _b("remote.log.storage.manager.class.name", STRING, None, RO, NON_EMPTY_STRING),
    _b("remote.log.storage.manager.class.path", STRING, None, RO),
    _b("remote.log.storage.manager.impl.prefix", STRING, "rsm.config.", RO, NON_EMPTY_STRING),
    _b("remote.log.storage.system.enable", BOOLEAN, "false", RO),
    _b("replica.fetch.backoff.ms", INT, "1000", RO, at_least(0)),
    _b("replica.fetch.max.bytes", INT, "1048576", RO, at_least(0)),
    _b("replica.fetch.min.bytes", INT, "1", RO),
    _b("replica.fetch.response.max.bytes", INT, "10485760", RO, at_least(0)),
    _b("replica.fetch.wait.max.ms", INT, "500", RO),
    _b("replica.high.watermark.checkpoint.interval.ms", LONG, "5000", RO),
    _b("replica.lag.time.max.ms", LONG, "30000", RO),
    _b("replica.selector.class", STRING, None, RO),
    _b("replica.socket.receive.buffer.bytes", INT, "65536", RO),
    _b("replica.socket.timeout.ms", INT, "30000", RO),
    _b("replication.quota.window.num", INT, "11", RO, at_least(1)),
    _b("replication.quota.window.size.seconds", INT, "1", RO, at_least(1)),
    _b("request.timeout.ms", INT, "30000", RO),
    _b("reserved.broker.max.id", INT, "1000", RO, at_least(0)),
    _b("sasl.client.callback.handler.class", CLASS, None, RO),
    _b("sasl.enabled.mechanisms", LIST, "GSSAPI", DYN),
    _b("sasl.jaas.config", PASSWORD, None, DYN),
    _b("sasl.kerberos.kinit.cmd", STRING, "/usr/bin/kinit", DYN),
    _b("sasl.kerberos.min.time.before.relogin", LONG, "60000", DYN),
    _b("sasl.kerberos.principal.to.local.rules", LIST, "DEFAULT", DYN),
    _b("sasl.kerberos.service.name", STRING, None, DYN),
    _b("sasl.kerberos.ticket.renew.jitter", DOUBLE, "0.05", DYN),
    _b("sasl.kerberos.ticket.renew.window.factor", DOUBLE, "0.8", DYN),
    _b("sasl.login.callback.handler.class", CLASS, None, RO),
    _b("sasl.login.class", CLASS, None, RO),
    _b("sasl.login.connect.timeout.ms", INT, None, RO),
    _b("sasl.login.read.timeout.ms", INT, None, RO),
    _b("sasl.login.refresh.buffer.seconds", SHORT, "300", DYN),
    _b("sasl.login.refresh.min.period.seconds", SHORT, "60", DYN),
    _b("sasl.login.refresh.window.factor", DOUBLE, "0.8", DYN),
    _b("sasl.login.refresh.window.jitter", DOUBLE, "0.05", DYN),
    _b("sasl.login.retry.backoff.max.ms", LONG, "10000", RO),
    _b("sasl.login.retry.backoff.ms", LONG, "100", RO),
    _b("sasl.mechanism.controller.protocol", STRING, "GSSAPI", RO),
    _b("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI", DYN),
    _b("sasl.oauthbearer.clock.skew.seconds", INT, "30", RO),
    _b("sasl.oauthbearer.expected.audience", LIST, None, RO),
    _b("sasl.oauthbearer.expected.issuer", STRING, None, RO),
    _b("sasl.oauthbearer.jwks.endpoint.refresh.ms", LONG, "3600000", RO),
    _b("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", LONG, "10000", RO),
    _b("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", LONG, "100", RO),
    _b("sasl.oauthbearer.jwks.endpoint.url", STRING, None, RO),
    _b("sasl.oauthbearer.scope.claim.name", STRING, "scope", RO),
    _b("sasl.oauthbearer.sub.claim.name", STRING, "sub", RO),
    _b("sasl.oauthbearer.token.endpoint.url", STRING, None, RO),
    _b("sasl.server.callback.handler.class", CLASS, None, RO),
    _b("sasl.server.max.receive.size", INT, "524288", RO),
    _b("security.inter.broker.protocol", STRING, "PLAINTEXT", RO, SECURITY_PROTOCOLS),
    _b("security.providers", STRING, None, RO),
    _b("socket.connection.setup.timeout.max.ms", LONG, "30000", RO),
    _b("socket.connection.setup.timeout.ms", LONG, "10000", RO),
    _b("socket.listen.backlog.size", INT, "50", RO, at_least(1)),
    _b("socket.receive.buffer.bytes", INT, "102400", RO),
    _b("socket.request.max.bytes", INT, "104857600", RO, at_least(1)),
    _b("socket.send.buffer.bytes", INT, "102400", RO),
    _b("ssl.allow.dn.changes", BOOLEAN, "false", RO),
    _b("ssl.allow.san.changes", BOOLEAN, "false", RO),
    _b("ssl.cipher.suites", LIST, "", DYN),
    _b("ssl.client.auth", STRING, "none", DYN, SSL_CLIENT_AUTH),
    _b("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", DYN),
    _b("ssl.endpoint.identification.algorithm", STRING, "https", DYN),
    _b("ssl.engine.factory.class", CLASS, None, DYN),
    _b("ssl.key.password", PASSWORD, None, DYN),
    _b("ssl.keymanager.algorithm", STRING, "SunX509", DYN),
    _b("ssl.keystore.certificate.chain", PASSWORD, None, DYN),
    _b("ssl.keystore.key", PASSWORD, None, DYN),
    _b("ssl.keystore.location", STRING, None, DYN),
    _b("ssl.keystore.password", PASSWORD, None, DYN),
    _b("ssl.keystore.type", STRING, "JKS", DYN),
    _b("ssl.principal.mapping.rules", STRING, "DEFAULT", RO),
    _b("ssl.protocol", STRING, "TLSv1.3", DYN),
    _b("ssl.provider", STRING, None, DYN),
    _b("ssl.secure.random.implementation", STRING, None, DYN),
    _b("ssl.trustmanager.algorithm", STRING, "PKIX", DYN),
    _b("ssl.truststore.certificates", PASSWORD, None, DYN),
    _b("ssl.truststore.location", STRING, None, DYN),
    _b("ssl.truststore.password", PASSWORD, None, DYN),
    _b("ssl.truststore.type", STRING, "JKS", DYN),
    _b("telemetry.max.bytes", INT, "1048576", RO, at_least(1)),
    _b("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, "10000", RO, at_least(1)),
    _b("transaction.max.timeout.ms", INT, "900000", RO, at_least(1)),
    _b("transaction.partition.verification.enable", BOOLEAN, "true", DYN),
    _b("transaction.remove.expired.transaction.cleanup.interval.ms", INT, "3600000", RO, at_least(1)),
    _b("transaction.state.log.load.buffer.size", INT, "5242880", RO, at_least(1)),
    _b("transaction.state.log.min.isr", INT, "2", RO, at_least(1)),
    _b("transaction.state.log.num.partitions", INT, "50", RO, at_least(1)),
    _b("transaction.state.log.replication.factor", SHORT, "3", RO, at_least(1)),
    _b("transaction.state.log.segment.bytes", INT, "104857600", RO, at_least(1)),
    _b("transactional.id.expiration.ms", INT, "604800000", RO, at_least(1)),
    _b("unclean.leader.election.enable", BOOLEAN, "false", DYN),
    _b("zookeeper.clientCnxnSocket", STRING, None, RO),
    _b("zookeeper.connect", STRING, None, RO),
    _b("zookeeper.connection.timeout.ms", INT, None, RO),
    _b("zookeeper.max.in.flight.requests", INT, "10", RO, at_least(1)),
    _b("zookeeper.metadata.migration.enable", BOOLEAN, "false", RO),
    _b("zookeeper.session.timeout.ms", INT, "18000", RO),
    _b("zookeeper.set.acl", BOOLEAN, "false", RO),
    _b("zookeeper.ssl.cipher.suites", LIST, None, RO),
    _b("zookeeper.ssl.client.enable", BOOLEAN, "false", RO),
    _b("zookeeper.ssl.crl.enable", BOOLEAN, "false", RO),
    _b("zookeeper.ssl.enabled.protocols", LIST, None, RO),
    _b("zookeeper.ssl.endpoint.identification.algorithm", STRING, "HTTPS", RO),
    _b("zookeeper.ssl.keystore.location", STRING, None, RO),
    _b("zookeeper.ssl.keystore.password", PASSWORD, None, RO),
    _b("zookeeper.ssl.keystore.type", STRING, None, RO),
    _b("zookeeper.ssl.ocsp.enable", BOOLEAN, "false", RO),
    _b("zookeeper.ssl.protocol", STRING, "TLSv1.2", RO),
    _b("zookeeper.ssl.truststore.location", STRING, None, RO),
    _b("zookeeper.ssl.truststore.password", PASSWORD, None, RO),
    _b("zookeeper.ssl.truststore.type", STRING, None, RO),
)}


# DynamicConfig.Broker's configs: set only dynamically (IncrementalAlterConfigs on a BROKER
# resource, per broker or as the cluster default), not KafkaConfig's. Kafka 3.9's DescribeConfigs
# lists one only once it is set, as a read-only LONG (observed); the replication rates are
# broker/replication/quota.py's bounds.
DYNAMIC_ONLY_BROKER_CONFIGS: dict[str, BrokerConfigKey] = {k.name: k for k in (
    _b("follower.replication.throttled.rate", LONG, str((1 << 63) - 1), DYN, at_least(0)),
    _b("leader.replication.throttled.rate", LONG, str((1 << 63) - 1), DYN, at_least(0)),
    _b("replica.alter.log.dirs.io.max.bytes.per.second", LONG, str((1 << 63) - 1), DYN, at_least(0)),
)}


# Kafka 4.3's internal broker configs (ConfigDef.defineInternal) that kproto reads: typed and validated
# when set, no "isn't a known config" warning, and, as Kafka's, listed by DescribeConfigs only when
# set (Kafka lists the originals of internal configs, never their defaults). Kafka 4.3's share-group
# keys kproto reads are here too: kproto's DescribeConfigs default listing is Kafka 3.9's.
INTERNAL_BROKER_CONFIGS: dict[str, BrokerConfigKey] = {k.name: k for k in (
    # GroupCoordinatorConfig: how long a share-partition recorded initializing waits before a
    # heartbeat initialises it again (broker/share/initialized_topics.py)
    _b("group.share.initialize.retry.interval.ms", INT, "30000", RO, at_least(1)),
    # GroupCoordinatorConfig (KIP-1263): the least time between two target assignments of a share
    # group (broker/share/membership.py), and the bounds of a group's share.assignment.interval.ms
    _b("group.share.assignment.interval.ms", INT, "1000", RO, at_least(0)),
    _b("group.share.min.assignment.interval.ms", INT, "0", RO, at_least(0)),
    _b("group.share.max.assignment.interval.ms", INT, "15000", RO, at_least(0)),
)}


# Broker configs that set the same thing in other units; the first one set wins
# (DynamicBrokerConfig.brokerConfigSynonyms), and DescribeConfigs lists them as synonyms.
_ROLL = ("log.roll.ms", "log.roll.hours")
_ROLL_JITTER = ("log.roll.jitter.ms", "log.roll.jitter.hours")
_RETENTION = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
_BROKER_SYNONYMS = {
    **dict.fromkeys(_ROLL, _ROLL),
    **dict.fromkeys(_ROLL_JITTER, _ROLL_JITTER),
    **dict.fromkeys(_RETENTION, _RETENTION),
    # the scheduler interval is the fallback of log.flush.interval.ms, not the other way round
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}
_LISTENER_OVERRIDE = re.compile(r"listener\.name\.[^.]*\.(.*)\Z", re.S)
# Listener overrides of these are written listener.name.<listener>.<mechanism>.<config>
_LISTENER_MECHANISM_CONFIGS = ("sasl.jaas.config", "sasl.login.callback.handler.class",
                               "sasl.login.class", "sasl.server.callback.handler.class",
                               "connections.max.reauth.ms")


def broker_synonyms(name: str) -> tuple[str, ...]:
    """The broker config names that can set `name`, most specific first (itself included)."""
    if name in _BROKER_SYNONYMS:
        return _BROKER_SYNONYMS[name]
    m = _LISTENER_OVERRIDE.match(name)
    if m:
        base = m.group(1)
        mechanism_config = next((c for c in _LISTENER_MECHANISM_CONFIGS if base.endswith(c)), None)
        return (name, mechanism_config or base)
    return (name,)


def broker_config_type(name: str) -> ConfigType:
    """The type DescribeConfigs reports for a broker config name; UNKNOWN for names Kafka doesn't know."""
    for n in (name,) + broker_synonyms(name):
        key = BROKER_CONFIGS.get(n)
        if key is not None:
            return key.type
    key = DYNAMIC_ONLY_BROKER_CONFIGS.get(name) or INTERNAL_BROKER_CONFIGS.get(name)
    return key.type if key is not None else ConfigType.UNKNOWN


# Factors that convert a broker synonym's unit into the topic config's milliseconds.
MINUTES, HOURS = 60_000, 3_600_000


@dataclass(frozen=True, slots=True)
class TopicConfigKey:
    """A topic config key: its type, default, check and the broker keys that give its default."""
    name: str
    type: ConfigType
    default: str | None                    # LogConfig's own default, used when no broker synonym exists
    validator: Validator | None
    synonyms: tuple[tuple[str, int], ...]  # broker configs giving the topic's default: (name, factor)

    @property
    def broker_synonym(self) -> str | None:
        return self.synonyms[0][0] if self.synonyms else None


def _t(name, type_, default, validator=None, *synonyms) -> TopicConfigKey:
    syn = tuple((s, 1) if isinstance(s, str) else s for s in synonyms)
    return TopicConfigKey(name, type_, default, validator, syn)


_LONG_MAX = str((1 << 63) - 1)

# In LogConfig's definition order: validation reports the first invalid value in this order.
TOPIC_CONFIGS: dict[str, TopicConfigKey] = {k.name: k for k in (
    _t("segment.bytes", INT, "1073741824", at_least(14), "log.segment.bytes"),
    _t("segment.ms", LONG, "604800000", at_least(1), "log.roll.ms", ("log.roll.hours", HOURS)),
    _t("segment.jitter.ms", LONG, "0", at_least(0),
       "log.roll.jitter.ms", ("log.roll.jitter.hours", HOURS)),
    _t("segment.index.bytes", INT, "10485760", at_least(4), "log.index.size.max.bytes"),
    _t("flush.messages", LONG, _LONG_MAX, at_least(1), "log.flush.interval.messages"),
    _t("flush.ms", LONG, _LONG_MAX, at_least(0),
       "log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    _t("retention.bytes", LONG, "-1", None, "log.retention.bytes"),
    _t("retention.ms", LONG, "604800000", at_least(-1),
       "log.retention.ms", ("log.retention.minutes", MINUTES), ("log.retention.hours", HOURS)),
    _t("max.message.bytes", INT, "1048588", at_least(0), "message.max.bytes"),
    _t("index.interval.bytes", INT, "4096", at_least(0), "log.index.interval.bytes"),
    _t("delete.retention.ms", LONG, "86400000", at_least(0), "log.cleaner.delete.retention.ms"),
    _t("min.compaction.lag.ms", LONG, "0", at_least(0), "log.cleaner.min.compaction.lag.ms"),
    _t("max.compaction.lag.ms", LONG, _LONG_MAX, at_least(1), "log.cleaner.max.compaction.lag.ms"),
    _t("file.delete.delay.ms", LONG, "60000", at_least(0), "log.segment.delete.delay.ms"),
    _t("min.cleanable.dirty.ratio", DOUBLE, "0.5", between(0, 1), "log.cleaner.min.cleanable.ratio"),
    _t("cleanup.policy", LIST, "delete", CLEANUP_POLICIES, "log.cleanup.policy"),
    _t("unclean.leader.election.enable", BOOLEAN, "false", None, "unclean.leader.election.enable"),
    _t("min.insync.replicas", INT, "1", at_least(1), "min.insync.replicas"),
    _t("compression.type", STRING, "producer", COMPRESSION_TYPES, "compression.type"),
    _t("compression.gzip.level", INT, "-1", GZIP_LEVEL, "compression.gzip.level"),
    _t("compression.lz4.level", INT, "9", between(1, 17), "compression.lz4.level"),
    _t("compression.zstd.level", INT, "3", between(-131072, 22), "compression.zstd.level"),
    _t("preallocate", BOOLEAN, "false", None, "log.preallocate"),
    _t("message.format.version", STRING, "3.0-IV1", METADATA_VERSION, "log.message.format.version"),
    _t("message.timestamp.type", STRING, "CreateTime", TIMESTAMP_TYPES, "log.message.timestamp.type"),
    _t("message.timestamp.difference.max.ms", LONG, _LONG_MAX, at_least(0),
       "log.message.timestamp.difference.max.ms"),
    _t("message.timestamp.before.max.ms", LONG, _LONG_MAX, at_least(0),
       "log.message.timestamp.before.max.ms"),
    _t("message.timestamp.after.max.ms", LONG, _LONG_MAX, at_least(0),
       "log.message.timestamp.after.max.ms"),
    _t("leader.replication.throttled.replicas", LIST, "", THROTTLED_REPLICAS),
    _t("follower.replication.throttled.replicas", LIST, "", THROTTLED_REPLICAS),
    _t("message.downconversion.enable", BOOLEAN, "true", None, "log.message.downconversion.enable"),
    _t("remote.storage.enable", BOOLEAN, "false"),
    _t("local.retention.ms", LONG, "-2", at_least(-2), "log.local.retention.ms"),
    _t("local.retention.bytes", LONG, "-2", at_least(-2), "log.local.retention.bytes"),
    _t("remote.log.copy.disable", BOOLEAN, "false"),
    _t("remote.log.delete.on.disable", BOOLEAN, "false"),
)}
