"""Thin, impure I/O: sockets and timers around the pure policy."""
