"""Listener security: TLS contexts, client principals, SASL authentication (Kafka's rules and keys)."""
