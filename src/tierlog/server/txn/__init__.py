"""The transaction coordinator (KIP-98): transactional ids, their producer ids and epochs, and the
two-phase end of each transaction, kept durable in the internal topic ``__transaction_state``."""
