"""Observability: counters, latency, logging setup, the Prometheus collector and the status page."""
