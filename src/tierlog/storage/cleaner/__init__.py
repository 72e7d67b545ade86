"""Kafka's log cleaner (compaction): pure decisions, the key → offset map, the cleaner-offset-checkpoint,
the cleaning of one log, and the threads that pick the dirtiest log."""
