"""The WebSocket protocol as browser players speak it (RFC 6455), server side: pure codecs.

js-dos speaks the DOSBox IPX protocol over a WebSocket: one binary message is one IPX packet,
exactly as in a UDP datagram (docs/protocols.md 4.10). The listener (io/websocket.py) runs on
these codecs: the opening handshake (§4.2: an HTTP/1.1 GET with ``Upgrade: websocket``,
answered ``101`` with the ``Sec-WebSocket-Accept`` key) and the frames (§5). They are here,
pure and compiled with the rest of ``wire/``, so that a message costs no coroutine: each one
is switched as it is read, and each copy is one unmasked frame made once for every player
(docs/benchmarks.md, "Players in a browser"). No extension is negotiated (js-dos offers
permessage-deflate; §9.1 lets the server ignore it), so a frame is a header and the packet.

A client that breaks the protocol gets a ``WebSocketError`` with the close code the RFC
gives (§7.4.1): an unmasked frame (§5.1), reserved bits or opcodes (§5.2), a fragmented or
long control frame (§5.5) are 1002; a message over ``MAX_MESSAGE`` is 1009.
"""

import base64
import hashlib
from typing import Final

from ipxbridge.errors import IpxbridgeError

# The largest IPX packet DOSBox takes from its server (IPXBUFFERSIZE in DOSBox's ipx.cpp,
# docs/protocols.md 4.1): a longer message is refused (``too_large``), not forwarded.
DOSBOX_MAX_PACKET: Final = 1424
# A message longer than this ends the connection (1009): far past any IPX packet, so only
# junk meets it, and it bounds what one connection holds while a message is reassembled.
MAX_MESSAGE: Final = 1 << 16
# The opening handshake: at most this many bytes (a browser's is about 500) and header lines.
MAX_HANDSHAKE: Final = 8192
MAX_HEADERS: Final = 64

OP_CONTINUATION: Final = 0x0
OP_TEXT: Final = 0x1
OP_BINARY: Final = 0x2
OP_CLOSE: Final = 0x8
OP_PING: Final = 0x9
OP_PONG: Final = 0xA

CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_PROTOCOL_ERROR: Final = 1002
CLOSE_POLICY: Final = 1008
CLOSE_TOO_BIG: Final = 1009
CLOSE_INTERNAL: Final = 1011

_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # §1.3
_FIN: Final = 0x80
_LEN_16: Final = 126  # the length follows in 2 bytes
_LEN_64: Final = 127  # in 8 bytes
_MAX_CONTROL: Final = 125  # §5.5

# Why a message from a browser player was dropped before the switch saw it.
WEBSOCKET_DROP_REASONS: Final[tuple[str, ...]] = (
    "text_frame",  # js-dos sends binary only; text is no IPX packet
    "too_large",  # longer than DOSBOX_MAX_PACKET
)

# How a connection ended (ipxbridge_ws_connections_closed_total{reason}).
CLOSE_REASONS: Final[tuple[str, ...]] = (
    "client",  # the browser closed it (js-dos: a close frame without a code, on exit)
    "ping_timeout",  # no pong within the ping interval
    "behind",  # its copies overflowed for behind_seconds
    "not_allowed",  # outside ipx.clients_allow after a reload
    "shutdown",  # the bridge stopped
    "error",  # it broke the protocol (a WebSocketError), or its TCP connection failed
)


class WebSocketError(IpxbridgeError):
    """A client broke the WebSocket protocol; ``code`` is the close code to answer with."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code
        self.why = why


# --- the opening handshake (§4.2) -----------------------------------------------------------


class Handshake:
    """A client's opening handshake: the path and the headers that matter here."""

    def __init__(self, path: str, headers: dict[str, list[str]]) -> None:
        self.path = path
        self.headers = headers  # lower-case name -> values, in order

    def header(self, name: str) -> str | None:
        """The first value of ``name`` (lower case), or None."""
        values = self.headers.get(name)
        return values[0] if values else None

    @property
    def key(self) -> str:
        """``Sec-WebSocket-Key`` (``parse_handshake`` checked it)."""
        return self.header("sec-websocket-key") or ""

    def protocols(self) -> list[str]:
        """The subprotocols asked for, in order (§4.1 ``Sec-WebSocket-Protocol``)."""
        return _tokens(self.headers.get("sec-websocket-protocol", []), lower=False)


def handshake_end(data: bytes) -> int:
    """Where the handshake in ``data`` ends (after its blank line), or -1: not yet."""
    end = data.find(b"\r\n\r\n")
    return -1 if end < 0 else end + 4


def parse_handshake(data: bytes) -> Handshake:
    """The opening handshake of a WebSocket client (§4.2.1), from the request's bytes.

    Raises:
        WebSocketError: not a WebSocket handshake this server takes; ``why`` says what, and
            ``code`` is the HTTP status to answer (400, or 426 for another version, §4.4).
    """
    try:
        text = data.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes every byte; kept for mypyc's sake
        raise WebSocketError(400, "not text") from None
    lines = text.split("\r\n")
    request = lines[0].split(" ")
    if len(request) != 3 or request[0] != "GET" or request[2] != "HTTP/1.1":
        raise WebSocketError(400, "not GET ... HTTP/1.1")
    headers: dict[str, list[str]] = {}
    for count, line in enumerate(lines[1:]):
        if not line:
            break
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise WebSocketError(400, "a malformed header line")
        if count >= MAX_HEADERS:
            raise WebSocketError(400, "too many header lines")
        headers.setdefault(name.lower(), []).append(value.strip())
    shake = Handshake(request[1], headers)
    if "websocket" not in _tokens(headers.get("upgrade", []), lower=True):
        raise WebSocketError(400, "no Upgrade: websocket")
    if "upgrade" not in _tokens(headers.get("connection", []), lower=True):
        raise WebSocketError(400, "no Connection: Upgrade")
    if shake.header("sec-websocket-version") != "13":
        raise WebSocketError(426, "not WebSocket version 13")
    try:
        key = base64.b64decode(shake.key, validate=True)
    except ValueError:
        key = b""
    if len(key) != 16:
        raise WebSocketError(400, "no valid Sec-WebSocket-Key")
    return shake


def _tokens(values: list[str], *, lower: bool) -> list[str]:
    """The comma-separated tokens of header values."""
    out: list[str] = []
    for value in values:
        for part in value.split(","):
            token = part.strip()
            if token:
                out.append(token.lower() if lower else token)
    return out


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key`` (§4.2.2, item 5.4)."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode("ascii")  # noqa: S324 - the RFC's hash, not a security use


def handshake_response(key: str, protocol: str | None) -> bytes:
    """The server's ``101 Switching Protocols`` (§4.2.2), choosing ``protocol`` if given."""
    lines = [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Accept: {accept_key(key)}",
    ]
    if protocol:
        lines.append(f"Sec-WebSocket-Protocol: {protocol}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


_STATUS_TEXT: Final = {
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    426: "Upgrade Required",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def http_refusal(status: int, reason: str) -> bytes:
    """A short HTTP answer that refuses the handshake and closes (``refused: REASON``)."""
    body = f"refused: {reason}\n".encode("ascii")
    head = [
        f"HTTP/1.1 {status} {_STATUS_TEXT.get(status, 'Error')}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if status == 426:
        head.append("Sec-WebSocket-Version: 13")  # §4.4
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


# --- frames (§5) ------------------------------------------------------------------------------


def server_frame(opcode: int, payload: bytes) -> bytes:
    """``payload`` as one server-to-client frame: FIN set, unmasked (§5.1), unfragmented."""
    size = len(payload)
    first = _FIN | opcode
    if size < _LEN_16:
        return bytes((first, size)) + payload
    if size < 1 << 16:
        return bytes((first, _LEN_16)) + size.to_bytes(2, "big") + payload
    return bytes((first, _LEN_64)) + size.to_bytes(8, "big") + payload


def binary_frame(payload: bytes) -> bytes:
    """A copy toward a player: one binary message (opcode 2) in one frame."""
    return server_frame(OP_BINARY, payload)


def close_frame(code: int, reason: str = "") -> bytes:
    """A close frame with ``code`` and a reason cut to fit a control frame (§5.5.1)."""
    text = reason.encode("utf-8")[: _MAX_CONTROL - 2]
    return server_frame(OP_CLOSE, code.to_bytes(2, "big") + text)


def unmask(mask: bytes, data: bytes) -> bytes:
    """``data`` XOR the 4-byte ``mask`` repeated (§5.3), as one big-integer operation."""
    size = len(data)
    if size == 0:
        return b""
    key = (mask * (size // 4 + 1))[:size]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(size, "big")


class FrameReader:
    """Client frames in, whole messages out: ``feed`` returns (opcode, payload) pairs.

    Data messages (text, binary) come out reassembled from their fragments; control frames
    (close, ping, pong) as they arrive, between fragments too (§5.4). At most
    ``MAX_MESSAGE`` bytes are held for a message, and at most one frame's header and
    ``MAX_MESSAGE`` bytes are buffered.
    """

    def __init__(self, max_message: int = MAX_MESSAGE) -> None:
        self.max_message = max_message
        self._buffer = b""
        self._fragments: list[bytes] = []
        self._fragment_size = 0
        self._fragment_opcode = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The messages completed by ``data``.

        Raises:
            WebSocketError: the client broke the protocol (close with its ``code``).
        """
        buffer = self._buffer + data if self._buffer else data
        out: list[tuple[int, bytes]] = []
        at = 0
        end = len(buffer)
        while end - at >= 2:
            first = buffer[at]
            second = buffer[at + 1]
            if first & 0x70:
                raise WebSocketError(CLOSE_PROTOCOL_ERROR, "reserved bits set (no extension)")
            if not second & 0x80:
                raise WebSocketError(CLOSE_PROTOCOL_ERROR, "an unmasked client frame")
            size = second & 0x7F
            head = 2
            if size == _LEN_16:
                head = 4
                if end - at < head:
                    break
                size = int.from_bytes(buffer[at + 2 : at + 4], "big")
            elif size == _LEN_64:
                head = 10
                if end - at < head:
                    break
                size = int.from_bytes(buffer[at + 2 : at + 10], "big")
            opcode = first & 0x0F
            fin = bool(first & _FIN)
            if opcode >= OP_CLOSE:
                if opcode > OP_PONG:
                    raise WebSocketError(CLOSE_PROTOCOL_ERROR, f"reserved opcode {opcode:#x}")
                if not fin or size > _MAX_CONTROL:
                    raise WebSocketError(CLOSE_PROTOCOL_ERROR, "a fragmented or long control frame")
            elif opcode > OP_BINARY:
                raise WebSocketError(CLOSE_PROTOCOL_ERROR, f"reserved opcode {opcode:#x}")
            elif size > self.max_message or self._fragment_size + size > self.max_message:
                raise WebSocketError(CLOSE_TOO_BIG, f"a message over {self.max_message} bytes")
            if end - at < head + 4 + size:
                break
            mask = buffer[at + head : at + head + 4]
            payload = unmask(mask, buffer[at + head + 4 : at + head + 4 + size])
            at += head + 4 + size
            if opcode >= OP_CLOSE:
                out.append((opcode, payload))
            else:
                self._data_frame(opcode, fin, payload, out)
        self._buffer = buffer[at:] if at < end else b""
        return out

    def _data_frame(
        self, opcode: int, fin: bool, payload: bytes, out: list[tuple[int, bytes]]
    ) -> None:
        """A text, binary or continuation frame (§5.4)."""
        if opcode == OP_CONTINUATION:
            if not self._fragments:
                raise WebSocketError(CLOSE_PROTOCOL_ERROR, "a continuation of nothing")
        elif self._fragments:
            raise WebSocketError(CLOSE_PROTOCOL_ERROR, "a new message inside a fragmented one")
        else:
            if fin:
                out.append((opcode, payload))
                return
            self._fragment_opcode = opcode
        self._fragments.append(payload)
        self._fragment_size += len(payload)
        if fin:
            out.append((self._fragment_opcode, b"".join(self._fragments)))
            self._fragments = []
            self._fragment_size = 0


def close_code(payload: bytes) -> int | None:
    """The status code of a client's close frame, or None when it has none (§5.5.1)."""
    return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
