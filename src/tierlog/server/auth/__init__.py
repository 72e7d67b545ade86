"""SASL authentication (sans-IO mechanism servers) and the per-connection SASL session."""
