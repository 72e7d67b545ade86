"""tierlog: a Kafka-compatible log broker with tiered storage and a Spark data pipeline."""

__version__ = "0.1.0"
