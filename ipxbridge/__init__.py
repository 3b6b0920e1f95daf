"""ipxbridge: make old LAN games find each other across modern networks.

The package is layered; imports only point inward:
``wire`` (pure codecs) <- ``policy`` (pure decisions, clock passed in) <- ``io`` / ``obs``
(thin asyncio and accounting) <- ``config`` / ``app`` (one service per feature) <-
``commands`` (one module per subcommand) <- ``cli`` (parsing and dispatch only).
docs/architecture.md draws it and follows a datagram through.
"""

__version__ = "0.1.0"
