"""WebSocket frames the bridge writes to browser players (RFC 6455 §5.2), and its limits.

js-dos speaks the DOSBox IPX protocol over a WebSocket: one binary message is one IPX packet,
exactly as in a UDP datagram (docs/protocols.md 3.10). The listener (io/websocket.py) reads
with aiohttp, which unmasks and reassembles the client's frames; toward a browser it writes
each copy as one unfragmented, unmasked binary frame itself, straight to the connection's
transport, because a copy is made on the switch's synchronous path and a coroutine per copy
would cost more than the copy (docs/benchmarks.md, "Players in a browser"). Compression is
never negotiated, so a frame is the header and the packet as it is.
"""

from typing import Final

# FIN set, opcode 2 (binary): one whole message per frame (RFC 6455 §5.2, §5.6).
_FIN_BINARY: Final = 0x82
_LEN_16: Final = 126  # the length follows in 2 bytes
_LEN_64: Final = 127  # in 8 bytes
_SMALL: Final = 126  # payloads shorter than this fit the first length byte

# The largest IPX packet DOSBox takes from its server (IPXBUFFERSIZE in DOSBox's ipx.cpp,
# docs/protocols.md 4.1): a longer message is refused (``too_large``), not forwarded.
DOSBOX_MAX_PACKET: Final = 1424


def binary_frame(payload: bytes) -> bytes:
    """``payload`` as one server-to-client binary frame: unmasked (§5.1), unfragmented."""
    size = len(payload)
    if size < _SMALL:
        return bytes((_FIN_BINARY, size)) + payload
    if size < 1 << 16:
        return bytes((_FIN_BINARY, _LEN_16)) + size.to_bytes(2, "big") + payload
    return bytes((_FIN_BINARY, _LEN_64)) + size.to_bytes(8, "big") + payload


# Why a message from a browser player was dropped before the switch saw it.
WEBSOCKET_DROP_REASONS: Final[tuple[str, ...]] = (
    "text_frame",  # js-dos sends binary only; text is no IPX packet
    "too_large",  # longer than DOSBOX_MAX_PACKET
)

# How a connection ended (ipxbridge_ws_connections_closed_total{reason}).
CLOSE_REASONS: Final[tuple[str, ...]] = (
    "client",  # the browser closed it (js-dos: code 1005 on exit)
    "ping_timeout",  # no pong within the ping interval
    "behind",  # its copies overflowed for behind_seconds
    "not_allowed",  # outside ipx.clients_allow after a reload
    "shutdown",  # the bridge stopped
    "error",  # a protocol error (aiohttp's, e.g. a frame over MAX_MESSAGE)
)
