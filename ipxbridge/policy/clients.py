"""The IPX switch's clients: registration, proof of receipt, keepalives and expiry (rule 2).

The switch (``policy/switch.py``) keeps its rules in one numbered list; this is rule 2 of
it, and ``ClientTable`` runs it. The switch asks the table about every datagram from an
address that is neither a peer, an uplink nor a segment, and about every copy it aims at a
client that has not proven itself yet.

2. An unknown address may only register; anything else from it is ``unregistered``. Nothing
   is sent to a new address before its registration reply (DOSBox takes the first datagram
   it receives as the reply, docs/protocols.md 4.2). A registered client stays until
   ``idle_timeout`` whether or not it answers keepalives: IPXWrapper never answers socket-2
   pings, and a DirectPlay host behind it is silent until someone enumerates
   (docs/protocols.md 6).

   Registration is one spoofable datagram, and so is any data packet, so a client is
   ``verified`` only by proving it receives what is sent to its address. Its node is the
   proof: by default it is keyed (``02`` + HMAC-SHA256 of "ip:port" with a secret key kept
   across restarts), so nobody can predict it, and a packet carrying it can only come from
   whoever read our registration reply: the client is verified at once, whatever program it
   runs (IPXWrapper included). ``ipxnet ping`` then prints that node as an address, as with
   ipxbox's random nodes (docs/protocols.md 4.5). Probes prove receipt too: a client that
   echoes the nonce the bridge puts in the source node of its probe is verified (DOSBox
   answers a ping to the pinger's node, docs/protocols.md 4.5; docs/reliability.md R7).
   With ``node_assignment: address`` (IPv4 + port, predictable) only the probe counts.

   A client that only listens must still hear the game from the moment it registers: DOSBox
   sends nothing after registration until its program does, a program waiting for another's
   broadcast may send nothing at all, and a DirectPlay host behind IPXWrapper says nothing
   until it is enumerated (docs/protocols.md 4.4, 6). So until it is verified a client is
   sent what any client is, but every byte toward its address (the registration reply,
   probes, ping answers, copies) is held to a rate per destination IPv4 address and one for
   the whole bridge (``policy/budget.ReflectionLimit``): whatever a stranger spoofs, that is
   all the bridge sends toward one victim, and toward all unproven addresses together. A
   newcomer is admitted only when its reply can go (DOSBox takes the first datagram it
   receives as the reply). The limits end for a client when it is verified; a probe goes a
   second after registration (``FIRST_PROBE_DELAY``), so a real DOSBox client, which
   answers probes even when its program only listens, is verified within a round trip of
   that. Copies held back are counted (``Decision.held``).

   Unverified clients live in their own bounded table (``max_unverified``), so spoofed
   registrations never take a verified player's place; when it is full, the oldest one that
   had a second to prove itself (its probe unanswered, or none let through) makes room. Per
   IPv4 address at most ``max_unverified_per_ip`` are kept: a newcomer from an address at
   the limit replaces that address's oldest unverified client (``evicted``), so many players
   behind one NAT are never locked out. A registration from UDP port 0 is refused.

   Rejoin: a packet from an unknown address whose source node is exactly ``node_for`` that
   address comes from a client registered before (the bridge restarted, or the client was
   expired or evicted while quiet): the bridge recomputes the node, so the client rejoins
   without registering again, verified when nodes are keyed (only a receiver of our reply
   knows it), unverified with ``address`` nodes.

   With ``clients_allow`` set, an address outside those networks may neither register nor
   rejoin (``not_allowed``): the DOSBox protocol has no authentication, so on a bridge
   reachable from the internet this is what keeps strangers and spoofed registrations out.

   Keepalives and expiry (``ClientTable.tick``): one that never answered is not pinged for
   ever: after ``unverified_probes`` keepalives it gets no more, so a spoofed registration
   draws a bounded number of keepalives toward its victim (docs/reliability.md I4), while an
   IPXWrapper host that never answers pings stays registered. A browser player's WebSocket
   connection (``connect``) is proven by its TCP handshake: it registers verified, outside
   the reflection limit, and stays while the connection is open.

Pure: ``now`` is a parameter; nonces come from the ``random_bytes`` the switch is given.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ipxbridge.policy.budget import ReflectionLimit
from ipxbridge.policy.ports import Address, Port
from ipxbridge.policy.switch_settings import SwitchSettings
from ipxbridge.wire.ipx import (
    HEADER_LEN,
    ZERO_NODE,
    IpxHeader,
    build_broadcast,
    build_ping,
    build_registration_reply,
)

# What the reflection limit is asked about (``ReflectionLimit.refused`` keys).
UNVERIFIED_KINDS: Final[tuple[str, ...]] = (
    "copy",
    "registration_reply",
    "probe",
    "ping_reply",
    "dplay_probe",
)

# An unverified client is probed with its first packet (that shows it has its registration
# reply), so a real DOSBox client, which answers pings (docs/protocols.md 4.5), is verified one
# round trip after it first speaks. One that says nothing is probed this long after
# registering, within the reflection limit. Not at once: DOSBox takes the first datagram it
# receives as its registration reply and never asks again (4.2), so a probe that overtook a
# reply, or came in place of a lost one, would give it the broadcast node as its address.
FIRST_PROBE_DELAY: Final = 1.0
# A real client answers a probe within a round trip; one silent this long after it did not.
PROOF_WAIT: Final = 1.0
# Copies to an unproven address leave this much of its reflection limit for a probe and a
# registration reply, so a client kept busy by broadcasts can still prove itself.
COPY_RESERVE: Final = 2 * HEADER_LEN

Reply = tuple[bytes, Address]  # a packet the bridge itself sends, and where


@dataclass
class Client:
    """A registered DOSBox-protocol client."""

    addr: Address
    node: bytes
    server_node: bytes  # the bridge's node as this client sees it (pings come from here)
    registered_at: float
    last_seen: float
    verified: bool = False  # proved it receives at its address
    probes: int = 0  # keepalives sent since it was last heard from
    last_keepalive: float = 0.0
    nonce: bytes = ZERO_NODE  # source node of its probes; echoing it verifies
    # Its own books for the status page: plain ints, bumped where the datagram is handled
    # anyway (received in the switch's _from_client, sent copies by io/ipx_endpoint.py),
    # nothing allocated.
    rx_packets: int = 0
    rx_bytes: int = 0
    tx_packets: int = 0
    tx_bytes: int = 0


@dataclass(frozen=True)
class SwitchEvent:
    """Something an operator wants in the log (registration, expiry...)."""

    # registered | reregistered | rejoined | verified | expired | evicted | shutdown |
    # not_allowed | left | uplink
    kind: str
    addr: Address
    node: bytes


class ClientTable:
    """The switch's DOSBox-protocol clients and browser players (rule 2, module docstring)."""

    def __init__(
        self,
        settings: SwitchSettings,
        *,
        node_for: Callable[[Address], bytes],
        server_node_for: Callable[[Address], bytes],
        random_bytes: Callable[[int], bytes],
        on_change: Callable[[], None],
    ) -> None:
        """An empty table.

        Args:
            settings: the switch's tunables (the limits and timers of rule 2).
            node_for: the node assigned to a client's address.
            server_node_for: the bridge's node as seen by a new client.
            random_bytes: where probe nonces come from (they must be unguessable).
            on_change: called whenever a client comes or goes (the switch's ports change).
        """
        self.settings = settings
        self.node_for = node_for
        self._server_node_for = server_node_for
        self._random_bytes = random_bytes
        self._on_change = on_change
        self.clients: dict[Address, Client] = {}
        self.by_node: dict[bytes, Client] = {}
        # Registered, not yet proven; insertion order = age, for eviction.
        self.unverified: dict[Address, None] = {}
        # Per IPv4 address, its unverified clients, oldest first (``max_unverified_per_ip``).
        self._unverified_by_ip: dict[str, dict[Address, None]] = {}
        # Everything aimed at unproven addresses, in bytes per second.
        self.reflection = ReflectionLimit(
            settings.unverified_address_bytes_per_second,
            settings.unverified_address_byte_burst,
            settings.unverified_total_bytes_per_second,
            settings.unverified_total_byte_burst,
        )
        # WebSocket connections (``connect``): addresses proven by their transport.
        self.connected: set[Address] = set()
        self._events: list[SwitchEvent] = []

    def reconfigure(self, settings: SwitchSettings) -> None:
        """New tunables; clients stay, unless ``clients_allow`` now bars them."""
        self.settings = settings
        self.reflection.reconfigure(
            settings.unverified_address_bytes_per_second,
            settings.unverified_address_byte_burst,
            settings.unverified_total_bytes_per_second,
            settings.unverified_total_byte_burst,
        )
        for addr in [a for a in self.clients if not settings.allows(a[0])]:
            self.remove(addr, "not_allowed")

    # --- who gets in -----------------------------------------------------------------------

    def refused(self, src: Address) -> str | None:
        """Why nothing from ``src``, neither a client nor a peer, is taken, if so."""
        if not self.settings.allows(src[0]):
            return "not_allowed"
        if src[1] == 0:
            # No real client sends from port 0; a reply to it would go nowhere useful.
            return "source_port_zero"
        return None

    def connect(self, addr: Address) -> None:
        """A WebSocket connection opened from ``addr`` (``connections.connection_address``).

        Its address is proven by the TCP handshake, so it registers verified, outside the
        reflection limit, and stays while the connection is open: the listener's pings tell
        whether it is alive (keepalives and idle expiry are for UDP clients).
        """
        self.connected.add(addr)

    def disconnect(self, addr: Address) -> None:
        """The connection from ``addr`` closed: its client leaves."""
        self.connected.discard(addr)
        self.remove(addr, "left")

    def register(self, addr: Address, now: float) -> bytes | str:
        """A registration from ``addr``: the reply to send it, or the drop reason."""
        client = self.clients.get(addr)
        reflection = self.reflection
        if client is None and addr in self.connected:
            proven = self._admit(addr, self.node_for(addr), now, "registered", verified=True)
            if isinstance(proven, str):
                return proven
            return build_registration_reply(proven.node, proven.server_node)
        if client is not None:
            # Idempotent: same node, the reply is simply sent again (the first may be lost),
            # within the reflection limit while the address is unproven.
            client.last_seen = now
            self._events.append(SwitchEvent("reregistered", addr, client.node))
            reply = build_registration_reply(client.node, client.server_node)
            if not client.verified and not reflection.allow(
                addr[0], len(reply), now, "registration_reply"
            ):
                return "unverified_rate"
            return reply
        # A newcomer is admitted only if its reply can go now: DOSBox takes the first
        # datagram it receives as the reply (docs/protocols.md 4.2), so a client must get
        # nothing before it. The reply is as long as the registration.
        bound = reflection.check(addr[0], HEADER_LEN, now)
        if bound is not None:
            reflection.refuse("registration_reply", bound)
            return "unverified_rate"
        admitted = self._admit(addr, self.node_for(addr), now, "registered")
        if isinstance(admitted, str):
            return admitted
        reply = build_registration_reply(admitted.node, admitted.server_node)
        reflection.spend(addr[0], len(reply), now)
        return reply

    def rejoin(self, addr: Address, node: bytes, now: float) -> Client | str:
        """Re-admit a client whose packet carries ``node_for(addr)``, or the drop reason.

        Verified at once when nodes are keyed (only a receiver of our reply knows it);
        unverified with ``address`` nodes, which anyone can predict.
        """
        keyed = self.settings.node_assignment == "keyed"
        admitted = self._admit(addr, node, now, "rejoined", verified=keyed)
        if keyed and isinstance(admitted, Client):
            self._events.append(SwitchEvent("verified", addr, admitted.node))
        return admitted

    def _admit(
        self, addr: Address, node: bytes, now: float, kind: str, *, verified: bool = False
    ) -> Client | str:
        """A new client (unverified unless ``verified``), or the drop reason why not."""
        cfg = self.settings
        if len(self.clients) - len(self.unverified) >= cfg.max_clients:
            return "clients_full"
        if not verified:
            room = self._room_for_unverified(addr[0], now)
            if room:
                return room
        client = Client(
            addr,
            node,
            self._server_node_for(addr),
            now,
            now,
            verified=verified,
            last_keepalive=now,
            nonce=ZERO_NODE if verified else self._random_bytes(6),
        )
        self.clients[addr] = client
        if not verified:
            self.unverified[addr] = None
            self._unverified_by_ip.setdefault(addr[0], {})[addr] = None
        self.by_node[node] = client
        self._on_change()
        self._events.append(SwitchEvent(kind, addr, node))
        return client

    def _room_for_unverified(self, ip: str, now: float) -> str:
        """Make room for one more unverified client from ``ip``; the drop reason if none."""
        cfg = self.settings
        same_ip = self._unverified_by_ip.get(ip)
        if same_ip is not None and len(same_ip) >= cfg.max_unverified_per_ip:
            # Players behind one NAT share its address: the newest gets in, its oldest
            # unverified neighbour (a spoofed registration, or a silent client that can
            # rejoin) goes.
            self.remove(next(iter(same_ip)), "evicted")
            return ""
        if len(self.unverified) < cfg.max_unverified:
            return ""
        # Make room with the oldest client that had time to prove itself and did not: a
        # second to answer its probe, or, if the limit held it, a second past when it was
        # due. Newer ones may still be waiting for it, or about to send their first packet.
        # The table is in order of admission, and none admitted within PROOF_WAIT can have
        # had its chance: the walk stops there, so a flood of registrations that keeps the
        # table young costs one look per registration, not one per entry (bench/reflect.py:
        # 44-48 us a spoofed registration at 50,000/s from 10,000 addresses).
        clients = self.clients
        for addr in self.unverified:
            if now - clients[addr].registered_at < PROOF_WAIT:
                break
            if self._had_its_chance(addr, now):
                self.remove(addr, "evicted")
                return ""
        return "unverified_full"

    def _had_its_chance(self, addr: Address, now: float) -> bool:
        client = self.clients[addr]
        wait = PROOF_WAIT if client.probes else FIRST_PROBE_DELAY + PROOF_WAIT
        return now - client.last_keepalive >= wait

    # --- proof of receipt ------------------------------------------------------------------

    def prove(self, client: Client, header: IpxHeader, now: float) -> tuple[Reply, ...] | None:
        """What a packet from an unverified ``client`` proves, and what it draws.

        None: it answers the nonce of our probe, so the client is verified and the packet
        is consumed. Otherwise the packet goes on, with what to send the client: after its
        first packet a probe (it has its registration reply then: DOSBox sends nothing
        before, so a probe cannot be taken for the reply, docs/protocols.md 4.2), within
        the reflection limit; one round trip later it is verified.
        """
        if header.is_echo and header.dst_node == client.nonce:
            self._verify(client)
            return None
        if header.src_node == client.node and self.settings.node_assignment == "keyed":
            self._verify(client)  # its keyed node, which only our registration reply told it
        elif client.probes == 0:
            probe = build_ping(client.nonce)
            if self.reflection.allow(client.addr[0], len(probe), now, "probe"):
                client.probes = 1
                client.last_keepalive = now
                return ((probe, client.addr),)
        return ()

    def _verify(self, client: Client) -> None:
        """The client proved it receives at its address (its node, or its probe's nonce)."""
        client.verified = True
        client.probes = 0
        self._forget_unverified(client.addr)
        self._events.append(SwitchEvent("verified", client.addr, client.node))

    def _forget_unverified(self, addr: Address) -> None:
        if self.unverified.pop(addr, 0) is None:  # it was there (values are None)
            ip = addr[0]
            same_ip = self._unverified_by_ip[ip]
            del same_ip[addr]
            if not same_ip:
                del self._unverified_by_ip[ip]

    def within_limit(
        self, targets: tuple[Port, ...], size: int, now: float
    ) -> tuple[tuple[Port, ...], int]:
        """Leave out unverified clients the reflection limit refuses; count them."""
        unverified = self.unverified
        if unverified.keys().isdisjoint(targets):
            return targets, 0
        kept: list[Port] = []
        held = 0
        allow = self.reflection.allow
        for addr in targets:
            if (
                isinstance(addr, tuple)
                and addr in unverified
                and not allow(addr[0], size, now, "copy", COPY_RESERVE)
            ):
                held += 1
                continue
            kept.append(addr)
        return tuple(kept), held

    def probes(
        self, dst_socket: int, src_socket: int, payload: bytes, now: float
    ) -> list[tuple[bytes, Port]]:
        """A broadcast from the bridge to every client, each from its ``server_node``.

        Unverified clients get one only within the reflection limit.
        """
        out: list[tuple[bytes, Port]] = []
        for client in self.clients.values():
            packet = build_broadcast(client.server_node, dst_socket, src_socket, payload)
            if not client.verified and not self.reflection.allow(
                client.addr[0], len(packet), now, "dplay_probe"
            ):
                continue
            out.append((packet, client.addr))
        return out

    # --- leaving ---------------------------------------------------------------------------

    def remove(self, addr: Address, kind: str) -> None:
        """Forget a client (expiry, shutdown) and log why."""
        client = self.clients.pop(addr, None)
        if client is None:
            return
        self.by_node.pop(client.node, None)
        self._forget_unverified(addr)
        self._on_change()
        self._events.append(SwitchEvent(kind, addr, client.node))

    def pop_events(self) -> list[SwitchEvent]:
        """Return and clear the events recorded since the last call."""
        events, self._events = self._events, []
        return events

    def tick(self, now: float) -> list[tuple[bytes, Port]]:
        """Expire silent clients; return the keepalives and probes to send (module docstring)."""
        cfg = self.settings
        out: list[tuple[bytes, Port]] = []
        first_probe = min(FIRST_PROBE_DELAY, cfg.keepalive_interval)
        connected = self.connected
        for client in list(self.clients.values()):
            if connected and client.addr in connected:
                continue  # a WebSocket connection: alive while it is open (``connect``)
            silent = now - client.last_seen
            if silent >= cfg.idle_timeout:
                self.remove(client.addr, "expired")
                continue
            if client.verified:
                if silent < cfg.keepalive_interval:
                    continue
                if now - client.last_keepalive < cfg.keepalive_interval:
                    continue
            else:
                if client.probes >= cfg.unverified_probes:
                    continue
                wait = first_probe if client.probes == 0 else cfg.keepalive_interval
                if now - client.last_keepalive < wait:
                    continue
                # A probe is traffic toward an unproven address too: within the reflection
                # limit. A real DOSBox client answers it, even when it only listens
                # (docs/protocols.md 4.5), and is then limited no longer.
                if not self.reflection.allow(client.addr[0], HEADER_LEN, now, "probe"):
                    continue
            client.probes += 1
            client.last_keepalive = now
            # An unverified client's probe comes from its nonce; its answer proves receipt.
            source = client.server_node if client.verified else client.nonce
            out.append((build_ping(source), client.addr))
        self.reflection.purge(now)
        return out
