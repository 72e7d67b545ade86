"""Classic consumer groups: the rebalance state machine, the coordinator, ``__consumer_offsets`` records."""
