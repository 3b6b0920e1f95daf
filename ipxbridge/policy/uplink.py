"""ipxbox's uplink protocol: the server's and the client's state machines (docs/protocols.md 3.9).

Pure: the clock is a parameter (``now``), randomness is passed in, and the results are the
packets to send. The codec is ``wire/uplink.py``; the switch (``policy/switch.py``) treats
an authenticated uplink as a port like an RFC 1234 peer.

Server (``UplinkServer``), per source address:

1. ``get-challenge-request`` from an unknown address: a pending entry with a 64-byte random
   challenge, answered with ``get-challenge-response``. Nothing else from a stranger.
2. ``submit-solution`` from a pending address: a client challenge under 64 bytes gets no
   answer at all (as ipxbox); a right solution authenticates the address and is answered
   ``submit-solution-accepted`` with the server's solution; a wrong one
   ``submit-solution-rejected``, and the entry goes.
3. Authenticated: every IPX packet passes both ways. The server sends ``keepalive`` when it
   has sent nothing for ``keepalive_after``; a client silent for ``idle_timeout`` is dropped;
   ``close-connection`` ends it. Control packets are consumed, never switched.

The port must not be an amplifier: the handshake is answered by one UDP datagram a
stranger can spoof. So a reply is sent only if it is at most ``max_amplification`` times
the request (ipxbox's request is 103 bytes, the response 190), at most ``reply_rate`` a
second per address and ``global_reply_rate`` in all; pending entries are bounded overall
and per IPv4 address (the oldest makes room), authenticated uplinks bounded too. What is
held back is counted by reason.

Client (``UplinkClient``): connect → challenge → submit → connected, or rejected. Each step
is resent every ``resend_interval`` at most ``attempts`` times; then it waits (exponential
backoff, capped) and starts again. It acts only on control packets that answer its own
handshake step: once connected, ipxbox forwards other uplinks' control packets as data, so
a ``close-connection`` or a stale ``accepted`` seen then is ignored. The server's solution
is checked (mutual authentication). Liveness: the server sends keepalives when idle, so a
server silent for ``liveness`` is gone, and the client reconnects.
"""

import hmac
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from ipxbridge.policy.bucket import TokenBucket
from ipxbridge.wire.errors import WireError
from ipxbridge.wire.uplink import (
    CLOSE_CONNECTION,
    GET_CHALLENGE_REQUEST,
    GET_CHALLENGE_RESPONSE,
    KEEPALIVE,
    MIN_CHALLENGE,
    SOLUTION_ACCEPTED,
    SOLUTION_REJECTED,
    SUBMIT_SOLUTION,
    UplinkMessage,
    build_control,
    parse_control,
    solve,
)

Address = tuple[str, int]

# Why a control packet to the server side got no answer (a closed set, for the metrics).
UPLINK_DROP_REASONS: Final[tuple[str, ...]] = (
    "uplink_disabled",  # no uplink_password configured
    "uplink_rate_limited",  # per address or overall reply budget spent
    "uplink_amplification",  # the reply would be over twice the request
    "uplink_short_challenge",  # client challenge under 64 bytes: no answer (as ipxbox)
    "uplink_unexpected",  # a message not valid in the address's state
    "uplink_full",  # max_uplinks authenticated already
    "uplink_not_connected",  # data on a client uplink's socket before its handshake ended
)
HANDSHAKE_OUTCOMES: Final[tuple[str, ...]] = (
    "accepted",
    "rejected",
    "short_challenge",
    "no_answer",
    "bad_server_solution",
)


@dataclass(frozen=True)
class UplinkServerSettings:
    """Bounds of the server side (times in seconds)."""

    max_pending: int = 64
    max_pending_per_ip: int = 4
    max_uplinks: int = 16
    pending_timeout: float = 10.0  # a handshake takes at most 5 resends a second apart
    idle_timeout: float = 600.0  # ipxbox: 10 min
    keepalive_after: float = 5.0  # ipxbox: keepalive when nothing was sent for 5 s
    reply_rate: float = 2.0  # handshake replies per second per address...
    reply_burst: int = 6  # ... a client's five resends fit
    global_reply_rate: float = 50.0
    global_reply_burst: int = 100
    max_amplification: float = 2.0


@dataclass
class ServerSession:
    """One address talking the uplink protocol to us."""

    addr: Address
    challenge: bytes
    started: float
    last_heard: float
    last_sent: float
    bucket: TokenBucket  # its handshake replies
    authenticated: bool = False
    client_challenge: bytes = b""


@dataclass(frozen=True)
class ServerResult:
    """What the server side made of one control packet.

    ``detail``: ``uplink`` (handled) or a drop reason (``UPLINK_DROP_REASONS`` or the
    codec's). ``authenticated``/``closed``: the address became, or stopped being, a port.
    """

    detail: str
    replies: tuple[bytes, ...] = ()
    authenticated: bool = False
    closed: bool = False

    @property
    def dropped(self) -> bool:
        """No reply and no state change worth calling handled."""
        return self.detail != "uplink"


@dataclass(frozen=True)
class UplinkEvent:
    """Something for the log: accepted, rejected, closed, expired, short_challenge..."""

    kind: str
    addr: Address


class UplinkServer:
    """The server side, for every address on the DOSBox-protocol socket."""

    def __init__(
        self,
        password: bytes,
        random_bytes: Callable[[int], bytes],
        settings: UplinkServerSettings | None = None,
        *,
        evictions: Counter[tuple[str, str]] | None = None,
    ) -> None:
        self.password = password
        self.settings = settings or UplinkServerSettings()
        self._random = random_bytes
        self.sessions: dict[Address, ServerSession] = {}
        self._pending: OrderedDict[Address, None] = OrderedDict()  # oldest first
        self._global: TokenBucket | None = None
        self.handshakes: Counter[str] = Counter()  # outcome -> count
        self.held: Counter[str] = Counter()  # replies not sent, by reason
        self.evictions: Counter[tuple[str, str]] = Counter() if evictions is None else evictions
        self.events: list[UplinkEvent] = []

    @property
    def authenticated(self) -> list[Address]:
        """The authenticated uplinks' addresses."""
        return [a for a, s in self.sessions.items() if s.authenticated]

    @property
    def pending(self) -> int:
        """Handshakes under way."""
        return len(self._pending)

    def _reply(
        self, session: ServerSession, message: UplinkMessage, request: int, now: float
    ) -> tuple[bytes, ...] | str:
        """The encoded reply if every budget allows it, else the reason it is held."""
        packet = build_control(message)
        cfg = self.settings
        if len(packet) > cfg.max_amplification * request:
            reason = "uplink_amplification"
        elif not session.bucket.take(now):
            reason = "uplink_rate_limited"
        else:
            if self._global is None:
                self._global = TokenBucket(cfg.global_reply_rate, cfg.global_reply_burst, now)
            if self._global.take(now):
                session.last_sent = now
                return (packet,)
            reason = "uplink_rate_limited"
        self.held[reason] += 1
        return reason

    def handle(self, data: bytes, src: Address, now: float) -> ServerResult:
        """One control packet (``wire.uplink.is_uplink_control``) from ``src``. Never raises."""
        try:
            message = parse_control(data)
        except WireError as exc:
            return ServerResult(exc.reason)
        session = self.sessions.get(src)
        if session is None:
            if message.type != GET_CHALLENGE_REQUEST:
                return ServerResult("uplink_unexpected")
            session = self._new_session(src, now)
        session.last_heard = now
        kind = message.type
        if kind == GET_CHALLENGE_REQUEST:
            # Resent requests get the same challenge: the client may hold an earlier answer.
            out = self._reply(
                session, UplinkMessage(GET_CHALLENGE_RESPONSE, session.challenge), len(data), now
            )
            return ServerResult("uplink", out) if isinstance(out, tuple) else ServerResult(out)
        if kind == SUBMIT_SOLUTION:
            return self._submit(session, message, len(data), now)
        if kind == CLOSE_CONNECTION and session.authenticated:
            self._forget(src)
            self.events.append(UplinkEvent("closed", src))
            return ServerResult("uplink", closed=True)
        if kind == KEEPALIVE and session.authenticated:
            return ServerResult("uplink")
        return ServerResult("uplink_unexpected")

    def _new_session(self, src: Address, now: float) -> ServerSession:
        cfg = self.settings
        same_ip = [a for a in self._pending if a[0] == src[0]]
        if len(same_ip) >= cfg.max_pending_per_ip:
            self._forget(same_ip[0])
            self.evictions[("uplink_pending", "per_ip")] += 1
        elif len(self._pending) >= cfg.max_pending:
            self._forget(next(iter(self._pending)))
            self.evictions[("uplink_pending", "oldest")] += 1
        session = ServerSession(
            src,
            self._random(MIN_CHALLENGE),
            now,
            now,
            now,
            TokenBucket(cfg.reply_rate, cfg.reply_burst, now),
        )
        self.sessions[src] = session
        self._pending[src] = None
        return session

    def _forget(self, addr: Address) -> None:
        self.sessions.pop(addr, None)
        self._pending.pop(addr, None)

    def _submit(
        self, session: ServerSession, message: UplinkMessage, size: int, now: float
    ) -> ServerResult:
        addr = session.addr
        client_challenge = message.challenge or b""
        if len(client_challenge) < MIN_CHALLENGE:
            # ipxbox answers nothing here; neither do we (and it costs a stranger nothing).
            self.handshakes["short_challenge"] += 1
            self.events.append(UplinkEvent("short_challenge", addr))
            return ServerResult("uplink_short_challenge")
        expected = solve("client", self.password, session.challenge)
        if not hmac.compare_digest(message.solution or b"", expected):
            out = self._reply(session, UplinkMessage(SOLUTION_REJECTED), size, now)
            if not session.authenticated:
                # A spoofed wrong answer must not end a working uplink; a pending one goes.
                self._forget(addr)
            self.handshakes["rejected"] += 1
            self.events.append(UplinkEvent("rejected", addr))
            return ServerResult("uplink", out) if isinstance(out, tuple) else ServerResult(out)
        first = not session.authenticated
        if first and len(self.authenticated) >= self.settings.max_uplinks:
            self._forget(addr)
            return ServerResult("uplink_full")
        answer = UplinkMessage(
            SOLUTION_ACCEPTED, solution=solve("server", self.password, client_challenge)
        )
        out = self._reply(session, answer, size, now)
        if first:
            session.authenticated = True
            session.client_challenge = client_challenge
            self._pending.pop(addr, None)
            self.handshakes["accepted"] += 1
            self.events.append(UplinkEvent("accepted", addr))
        if isinstance(out, str):
            # The client resends its solution until an answer gets through.
            return ServerResult(out, authenticated=first)
        return ServerResult("uplink", out, authenticated=first)

    def heard(self, addr: Address, now: float) -> None:
        """A data packet from an authenticated uplink (it is alive)."""
        session = self.sessions.get(addr)
        if session is not None:
            session.last_heard = now

    def sent(self, addr: Address, now: float) -> None:
        """Something was sent to ``addr`` (no keepalive needed for a while)."""
        session = self.sessions.get(addr)
        if session is not None:
            session.last_sent = now

    def tick(self, now: float) -> tuple[list[tuple[bytes, Address]], list[Address]]:
        """Keepalives to send, and the authenticated uplinks that expired."""
        cfg = self.settings
        out: list[tuple[bytes, Address]] = []
        expired: list[Address] = []
        for addr, session in list(self.sessions.items()):
            if not session.authenticated:
                if now - session.started >= cfg.pending_timeout:
                    self._forget(addr)
                continue
            if now - session.last_heard >= cfg.idle_timeout:
                self._forget(addr)
                expired.append(addr)
                self.events.append(UplinkEvent("expired", addr))
            elif now - session.last_sent > cfg.keepalive_after:
                session.last_sent = now
                out.append((build_control(UplinkMessage(KEEPALIVE)), addr))
        return out, expired

    def pop_events(self) -> list[UplinkEvent]:
        """Return and clear the events since the last call."""
        events, self.events = self.events, []
        return events


class ClientState(StrEnum):
    """Where a client uplink is."""

    WAITING = "waiting"  # before the first attempt, or backing off after a failure
    CHALLENGE = "challenge"  # get-challenge-request sent
    SOLUTION = "solution"  # submit-solution sent
    CONNECTED = "connected"
    REJECTED = "rejected"  # wrong password; retried at the backoff cap


@dataclass(frozen=True)
class UplinkClientSettings:
    """Timers of the client side (seconds)."""

    resend_interval: float = 1.0  # ipxbox: every second...
    attempts: int = 5  # ... at most five times
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    # The server keepalives after 5 s of sending nothing: 30 s of silence means it is gone.
    liveness: float = 30.0


@dataclass
class UplinkClient:
    """One client uplink to a server (ipxbox or ipxbridge). Pure: feed it, send what it says.

    ``events`` collects (kind, detail) for the log: ``connected``, ``rejected``,
    ``no_answer`` (detail: the wait before the next try, s), ``bad_server_solution``,
    ``lost`` (the server went silent).
    """

    password: bytes
    random_bytes: Callable[[int], bytes]
    settings: UplinkClientSettings = field(default_factory=UplinkClientSettings)
    state: ClientState = ClientState.WAITING
    next_attempt: float = 0.0
    backoff: float = 0.0
    sends: int = 0  # of the current handshake step
    next_send: float = 0.0
    last_heard: float = 0.0
    challenge: bytes = b""  # ours, for the server to solve
    request: bytes = b""  # the current step's packet, resent as is
    reason: str = ""  # why the last attempt failed
    handshakes: Counter[str] = field(default_factory=Counter)
    ignored: Counter[str] = field(default_factory=Counter)  # control packets not acted on
    events: list[tuple[str, float]] = field(default_factory=list)

    @property
    def connected(self) -> bool:
        """Authenticated both ways: data flows."""
        return self.state is ClientState.CONNECTED

    def _step(self, packet: bytes, state: ClientState, now: float) -> list[bytes]:
        self.state = state
        self.request = packet
        self.sends = 1
        self.next_send = now + self.settings.resend_interval
        return [packet]

    def _fail(self, reason: str, now: float, *, event: str) -> None:
        """Clear the handshake; try again after the backoff (rejected: after the cap)."""
        cfg = self.settings
        self.challenge = b""
        self.request = b""
        self.reason = reason
        if event == "rejected":
            self.state = ClientState.REJECTED
            wait = cfg.backoff_max
        else:
            self.state = ClientState.WAITING
            self.backoff = (
                cfg.backoff_initial if self.backoff == 0 else min(cfg.backoff_max, self.backoff * 2)
            )
            wait = self.backoff
        self.next_attempt = now + wait
        self.events.append((event, wait))

    def tick(self, now: float) -> list[bytes]:
        """Resends, a new attempt when due, liveness. Returns the packets to send."""
        cfg = self.settings
        if self.state in (ClientState.WAITING, ClientState.REJECTED):
            if now < self.next_attempt:
                return []
            self.challenge = b""
            return self._step(
                build_control(UplinkMessage(GET_CHALLENGE_REQUEST)), ClientState.CHALLENGE, now
            )
        if self.state is ClientState.CONNECTED:
            if now - self.last_heard >= cfg.liveness:
                self.backoff = 0.0
                self._fail("the server went silent", now, event="lost")
            return []
        if now < self.next_send:
            return []
        if self.sends >= cfg.attempts:
            self.handshakes["no_answer"] += 1
            self._fail(f"no answer to {self.sends} tries", now, event="no_answer")
            return []
        self.sends += 1
        self.next_send = now + cfg.resend_interval
        return [self.request]

    def unreachable(self, now: float) -> None:
        """The socket reported an ICMP error (port or host unreachable)."""
        if self.state in (ClientState.CHALLENGE, ClientState.SOLUTION):
            self.handshakes["no_answer"] += 1
            self._fail("server unreachable (ICMP)", now, event="no_answer")
        elif self.state is ClientState.CONNECTED:
            self.backoff = 0.0
            self._fail("server unreachable (ICMP)", now, event="lost")

    def heard_data(self, now: float) -> None:
        """A data packet from the server (only counted while connected)."""
        self.last_heard = now

    def on_control(self, data: bytes, now: float) -> list[bytes]:
        """A control packet from the server. Returns what to send. Never raises."""
        try:
            message = parse_control(data)
        except WireError as exc:
            self.ignored[exc.reason] += 1
            return []
        state = self.state
        kind = message.type
        if kind == KEEPALIVE:
            if state is ClientState.CONNECTED:
                self.last_heard = now
            return []
        if state is ClientState.CHALLENGE and kind == GET_CHALLENGE_RESPONSE:
            server_challenge = message.challenge or b""
            if len(server_challenge) < MIN_CHALLENGE:
                self.ignored["short_challenge"] += 1
                return []
            self.challenge = self.random_bytes(MIN_CHALLENGE)
            answer = UplinkMessage(
                SUBMIT_SOLUTION,
                challenge=self.challenge,
                solution=solve("client", self.password, server_challenge),
            )
            return self._step(build_control(answer), ClientState.SOLUTION, now)
        if state is ClientState.SOLUTION and kind == SOLUTION_REJECTED:
            self.handshakes["rejected"] += 1
            self._fail("password rejected", now, event="rejected")
            return []
        if state is ClientState.SOLUTION and kind == SOLUTION_ACCEPTED:
            expected = solve("server", self.password, self.challenge)
            if not hmac.compare_digest(message.solution or b"", expected):
                # Mutual authentication: this server does not know the password.
                self.handshakes["bad_server_solution"] += 1
                self._fail("the server's solution is wrong", now, event="bad_server_solution")
                return []
            self.state = ClientState.CONNECTED
            self.handshakes["accepted"] += 1
            self.backoff = 0.0
            self.reason = ""
            self.request = b""
            self.last_heard = now
            self.events.append(("connected", 0.0))
            return []
        # Not an answer to our own step: once connected, ipxbox forwards other uplinks'
        # control packets (a close-connection too) as data; they are not for us.
        self.ignored[kind if kind in _KNOWN else "other"] += 1
        return []

    def close(self) -> list[bytes]:
        """Leaving: a close-connection if connected (ipxbox's client does the same)."""
        if self.state is not ClientState.CONNECTED:
            return []
        self.state = ClientState.WAITING
        return [build_control(UplinkMessage(CLOSE_CONNECTION))]

    def pop_events(self) -> list[tuple[str, float]]:
        """Return and clear the events since the last call."""
        events, self.events = self.events, []
        return events


_KNOWN: Final = frozenset(
    {
        GET_CHALLENGE_REQUEST,
        GET_CHALLENGE_RESPONSE,
        SUBMIT_SOLUTION,
        SOLUTION_ACCEPTED,
        SOLUTION_REJECTED,
        KEEPALIVE,
        CLOSE_CONNECTION,
    }
)
