"""Observability: in-process accounting, logging setup (and later the Prometheus exposition)."""
