"""Configuration: one definition per key, validation, and the resolved broker and log configs."""

from tierlog.config.broker_config import BrokerConfig, parse_properties
from tierlog.config.definition import ConfigDef, ConfigKey, Importance, Scope, Type
from tierlog.config.keys import BROKER_DEF, TOPIC_DEF
from tierlog.config.log_config import LogConfig

__all__ = [
    "BROKER_DEF",
    "TOPIC_DEF",
    "BrokerConfig",
    "ConfigDef",
    "ConfigKey",
    "Importance",
    "LogConfig",
    "Scope",
    "Type",
    "parse_properties",
]
