"""Broker and topic configuration with Kafka's names, defaults, validation and DescribeConfigs view.

    catalog        Kafka 3.9's broker and topic config definitions (tables)
    properties     Java .properties parsing
    broker_config  BrokerConfig: embedded single-node settings + file + overrides + dynamic layers
    topic_config   topic override validation and effective values
    alter          IncrementalAlterConfigs / AlterConfigs on topic overrides
    describe       DescribeConfigs entries
    kraft          KRaft settings (process.roles, controller listeners, quorum voters)
    voters         `--initial-controllers` voter strings (Kafka's DynamicVoters.parse)
    groups         the group coordinator's settings and the assignor names
    types          ConfigError, StartupError and the config types
"""
from broker.config.alter import OpType, alter_topic_configs, incremental_alter_topic_configs
from broker.config.broker_config import EMBEDDED_CONFIG, BrokerConfig, parse_override
from broker.config.describe import (
    ConfigEntry, ConfigSynonym, describe_broker, describe_broker_resource, describe_cluster_default,
    describe_topic, kafka_map_order)
from broker.config.listeners import Endpoint
from broker.config.properties import load_properties, parse_properties
from broker.config.topic_config import TopicConfig, validate_topic_config
from broker.config.types import ConfigError, ConfigSource, ConfigType

__all__ = [
    "BrokerConfig", "ConfigEntry", "ConfigError", "ConfigSource", "ConfigSynonym", "ConfigType",
    "EMBEDDED_CONFIG", "Endpoint", "OpType", "TopicConfig", "alter_topic_configs",
    "describe_broker", "describe_broker_resource", "describe_cluster_default", "describe_topic",
    "incremental_alter_topic_configs", "kafka_map_order", "load_properties", "parse_override",
    "parse_properties", "validate_topic_config",
]
