"""Root of the ipxbridge exception tree.

Which exceptions are legitimate (h11 style): ``WireError`` for malformed remote input (always
caught at the I/O boundary and counted), ``ConfigError`` for a bad configuration (exit 2) and
``StartupError`` for an environment problem found at start (exit 2). Anything else is a bug.
"""


class IpxbridgeError(Exception):
    """Base class of every error ipxbridge raises on purpose."""


class StartupError(IpxbridgeError):
    """The bridge cannot start in this environment (port in use, permission denied...)."""
