"""Take docs/status-page.png: the live status page during a made-up LAN party.

The browser test (tests/integration/test_status_page.py) takes its own screenshots into
tests/artifacts/, with the hostile game names it checks. This script takes the picture that
README.md and docs/status-page.md show: a bridge (``python -m ipxbridge run``, relaying
DirectPlay broadcasts between its LAN and ``vpn0``) in a network namespace; nine
DOSBox-protocol players on the LAN joining over the first half minute, one leaving at 40 s;
three DirectPlay games hosted over IPX (a Total Annihilation 2v2 that starts, a Star Trek:
Armada 1v1 with its map, a Total Annihilation lobby), their game traffic at made-up but
plausible rates; a PC on the LAN and a player at home searching for DirectPlay games over
UDP; then headless Chromium (scripts/cdp.py) at 1366x768, the whole page.

Everything runs in network namespaces it creates (``ixbshot_*``; the 192.168.10.0/24 LAN and
10.8.0.0/24 link exist only inside them) and removes at the end, with whatever still runs in
them; no packet leaves them. The schedule and the payload sizes are fixed (a seeded
generator): a re-run gives the same picture but for the clock, the ports, the nodes and small
differences in the rates.

Needs root, iproute2, chromium and nftables (for the relay's fast path; without it the badge
says "off") - scripts/test.sh installs them all. From the repository::

    sudo .venv/bin/python scripts/status_screenshot.py

``--seconds`` sets how long the party runs before the picture (default 120; the traffic
plot spans 15 minutes), ``--out`` where the PNG goes (default docs/status-page.png).
"""

import argparse
import math
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for scripts.harness and scripts.cdp, run as a file

from ipxbridge.wire import ipx  # noqa: E402
from ipxbridge.wire.directplay import (  # noqa: E402
    SESSION_JOIN_DISABLED,
    EnumSessions,
    EnumSessionsReply,
    SessionDesc,
    SockAddr,
    build_enum_sessions,
    build_enum_sessions_reply,
)
from scripts.cdp import Browser  # noqa: E402
from scripts.harness import (  # noqa: E402
    BridgeProcess,
    Client,
    Netns,
    inside,
    namespaces,
    sh,
)

PREFIX = "ixbshot"
LAN = "192.168.10"
BRIDGE_IP = f"{LAN}.1"
SERVER = (BRIDGE_IP, 213)
ORIGIN = "http://127.0.0.1:9213"
VPN = "10.8.0"  # a point-to-point-ish link to a player at home, relayed like a VPN
DPLAY_PORT = 47624  # DirectPlay 4's enumeration port, which the broadcast relay copies
SEARCH_EVERY = 2.0  # a DirectPlay game's "find sessions" screen broadcasts this often
TICK = 0.05  # seconds between rounds of sends
ANNOUNCE_EVERY = 3.0  # a host answers a player's search for games this often
GAME_SOCKET = 0x4545  # the games' data socket (any will do; the tests' data uses it)
DPLAY_SOCKET = 0x4002  # the DirectPlay host's socket its replies come from

# ipxbridge/data/games.yaml, docs/protocols.md 8: the GUIDs the bridge names.
TOTAL_ANNIHILATION = uuid.UUID("99797420-F5F5-11CF-9827-00A0241496C8")
STAR_TREK_ARMADA = uuid.UUID("76F93801-9340-11D2-AE34-00600895C779")
INSTANCE_NS = uuid.UUID("4c1c6a4e-35a8-4f8e-9b3c-2f4d1e0a9b77")  # fixed session ids


@dataclass(frozen=True)
class Player:
    """One machine at the party: when it joins and, maybe, leaves (seconds into the run)."""

    joins: float
    leaves: float | None = None


@dataclass(frozen=True)
class Game:
    """A DirectPlay session hosted over IPX by its first member.

    Attributes:
        guid: the game's application GUID.
        name: the session name its host announces.
        members: indices into ``PLAYERS``, the host first.
        max_players: dwMaxPlayers (Armada sends 0 and keeps the real one in dwUser1).
        pps: packets a second each member sends each other member while the match runs.
        size: payload bytes of those packets, smallest and largest.
        starts: seconds into the run when the match starts (lobby chatter before).
        armada_map: for Armada, the map name its dwUser2..4 carry.
    """

    guid: uuid.UUID
    name: str
    members: tuple[int, ...]
    max_players: int
    pps: float
    size: tuple[int, int]
    starts: float | None
    armada_map: str = ""


PLAYERS = (
    Player(0.0),
    Player(2.5),
    Player(4.0),
    Player(7.0),
    Player(11.0),
    Player(14.0),
    Player(22.0),
    Player(27.0),
    Player(30.0, leaves=40.0),  # listed as gone for 5 minutes
)
GAMES = (
    Game(TOTAL_ANNIHILATION, "Friday TA 2v2", (0, 1, 2, 3), 4, 9.0, (48, 220), starts=12.0),
    Game(
        STAR_TREK_ARMADA,
        "LAN night 1v1",
        (4, 5),
        0,
        14.0,
        (40, 160),
        starts=20.0,
        armada_map="nebula2",
    ),
    Game(TOTAL_ANNIHILATION, "Newbies welcome - 3v3", (6, 7, 8), 6, 0.4, (30, 90), starts=None),
)


def armada_user(players: int, *, started: bool, map_name: str) -> tuple[int, int, int, int]:
    """dwUser1..4 as Star Trek: Armada fills them (ipxbridge/wire/dplay_user.py)."""
    flags = 0x02 | (0x20 if started else 0)  # head-to-head, started
    raw = bytes([0, players & 0x07, flags, 0]) + map_name.encode("cp1252").ljust(12, b"\0")
    words = [int.from_bytes(raw[i : i + 4], "little") for i in range(0, 16, 4)]
    return (words[0], words[1], words[2], words[3])


def drain(client: Client) -> None:
    """Read what the bridge sent this player; answer its pings as DOSBox does."""
    while True:
        try:
            data = client.sock.recv(70_000)
        except BlockingIOError:
            return
        header = ipx.parse_header(data)
        if header.is_echo and header.is_broadcast:
            client.sock.sendto(ipx.build_ping_reply(header.src_node, client.node), client.server)


class Searcher:
    """A Windows PC on a game's "find sessions" screen: DirectPlay 4 over UDP (not IPX).

    It broadcasts EnumSessions to port 47624 of its subnet; the bridge's broadcast relay
    copies them to its other interfaces (docs/relay.md). Nobody there hosts its game, so it
    keeps searching.
    """

    def __init__(self, ns: str, broadcast: str, game: uuid.UUID, offset: float) -> None:
        with inside(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        self.sock.bind(("0.0.0.0", 0))
        self.target = (broadcast, DPLAY_PORT)
        # replies would come over TCP to port 2300 of the packet's source (docs/protocols.md 7)
        self.request = build_enum_sessions(
            EnumSessions(game, 0, None), sockaddr=SockAddr(2, 2300, "0.0.0.0")
        )
        self.next = offset

    def search(self, now: float) -> None:
        """Broadcast the next EnumSessions if it is time."""
        if now >= self.next:
            self.sock.sendto(self.request, self.target)
            self.next = now + SEARCH_EVERY


class Party:
    """The players and their games, played out on a schedule in a thread."""

    def __init__(self, player_ns: list[str], searchers: list[Searcher]) -> None:
        self.player_ns = player_ns
        self.searchers = searchers
        self.clients: dict[int, Client] = {}
        self.left: set[int] = set()
        self.rng = random.Random(1995)  # noqa: S311 - payload sizes, not secrets
        self.owed: dict[tuple[int, int], float] = {}
        self.next_announce = [0.0] * len(GAMES)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _present(self, index: int) -> bool:
        return index in self.clients and index not in self.left

    def _join_and_leave(self, now: float) -> None:
        for index, player in enumerate(PLAYERS):
            if index not in self.clients and now >= player.joins:
                client = Client(self.player_ns[index], SERVER)
                client.sock.setblocking(False)
                client.announce()
                self.clients[index] = client
            if player.leaves is not None and now >= player.leaves and self._present(index):
                client = self.clients[index]
                client.sock.sendto(ipx.build_shutdown(client.node), client.server)
                self.left.add(index)

    def _announce(self, number: int, game: Game, now: float) -> None:
        """The host answers a search: a bare EnumSessionsReply to a member's node."""
        here = [m for m in game.members if self._present(m)]
        if len(here) < 2 or here[0] != game.members[0] or now < self.next_announce[number]:
            return
        self.next_announce[number] = now + ANNOUNCE_EVERY
        started = game.starts is not None and now >= game.starts
        full = len(here) >= game.max_players > 0
        flags = SESSION_JOIN_DISABLED if started or full else 0
        user = (0, 0, 0, 0)
        if game.armada_map:  # Armada says all this in its user fields instead
            flags = 0
            user = armada_user(len(here), started=started, map_name=game.armada_map)
        desc = SessionDesc(
            flags,
            uuid.uuid5(INSTANCE_NS, game.name),
            game.guid,
            game.max_players,
            len(here),
            user,
        )
        reply = build_enum_sessions_reply(EnumSessionsReply(desc, game.name), bare=True)
        self.clients[here[0]].send(self.clients[here[1]].node, reply, sock=DPLAY_SOCKET)

    def _play(self, game: Game, now: float) -> None:
        """Each member sends each other member its share of this round's packets."""
        running = game.starts is not None and now >= game.starts
        for a in game.members:
            for b in game.members:
                if a == b or not (self._present(a) and self._present(b)):
                    continue
                # rates drift a little, as a match's do (a fixed curve, not noise)
                swing = 1.0 + 0.35 * math.sin(now / 11.0 + a) + 0.15 * math.sin(now / 3.0 + b)
                pps = game.pps * swing if running else 0.3
                owed = self.owed.get((a, b), 0.0) + pps * TICK
                while owed >= 1.0:
                    payload = self.rng.randbytes(self.rng.randint(*game.size))
                    self.clients[a].send(self.clients[b].node, payload, sock=GAME_SOCKET)
                    owed -= 1.0
                self.owed[a, b] = owed

    def _run(self) -> None:
        start = time.monotonic()
        try:
            while not self.stop.is_set():
                now = time.monotonic() - start
                self._join_and_leave(now)
                for number, game in enumerate(GAMES):
                    self._announce(number, game, now)
                    self._play(game, now)
                for searcher in self.searchers:
                    searcher.search(now)
                for client in self.clients.values():
                    drain(client)
                time.sleep(TICK)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc

    def check(self) -> None:
        """Raise what stopped the party thread, if anything did."""
        if self.error is not None:
            raise RuntimeError("the party stopped") from self.error

    def close(self) -> None:
        """Stop playing and close every player's socket."""
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(10)
        for client in self.clients.values():
            client.sock.close()
        for searcher in self.searchers:
            searcher.sock.close()


def build_lan(net: Netns, players: int) -> tuple[str, list[str]]:
    """Namespaces: the bridge's, with a Linux bridge ``lan``; one per PC on that LAN.

    The PCs are the IPX players and, last, a PC that plays over UDP; ``vpn0`` leads from the
    bridge's namespace to a player at home (``home``). Returns the bridge's and the PCs'.
    """
    box = net.add("box")
    sh("ip", "-n", box, "link", "add", "lan", "type", "bridge")
    sh("ip", "-n", box, "addr", "add", f"{BRIDGE_IP}/24", "brd", "+", "dev", "lan")
    sh("ip", "-n", box, "link", "set", "lan", "up")
    names = []
    for index in range(players + 1):
        ns = net.add(f"pc{index + 1}")
        port = f"pc{index + 1}"
        veth = ("type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "add", port, "netns", box, *veth)
        sh("ip", "-n", box, "link", "set", port, "master", "lan", "up")
        sh("ip", "-n", ns, "addr", "add", f"{LAN}.{11 + index}/24", "brd", "+", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        names.append(ns)
    home = net.add("home")
    net.link(box, "vpn0", f"{VPN}.1/24", home, "eth0", f"{VPN}.2/24")
    return box, names


def screenshot(net: Netns, box: str, profile: Path, out: Path) -> None:
    """Open the page in headless Chromium next to the bridge; save the whole page."""
    browser = Browser(lambda *cmd: net.exec_args(box, *cmd), profile)
    try:
        browser.viewport(1366, 768, mobile=False)
        browser.call("Page.navigate", {"url": f"{ORIGIN}/"})
        browser.wait_for("Number(document.body.dataset.updates || 0) >= 1", 15)
        games = len(GAMES)
        browser.wait_for(
            f"document.querySelectorAll('#games tbody tr').length === {games} && "
            "document.querySelectorAll('#clients tr.gone').length === 1",
            15,
        )
        # two more polls: the rates are a 5 s window, the plot needs its width
        updates = browser.evaluate("Number(document.body.dataset.updates)")
        browser.wait_for(f"Number(document.body.dataset.updates) >= {updates + 2}", 10)
        out.parent.mkdir(parents=True, exist_ok=True)
        browser.screenshot(out)
    finally:
        browser.close()


def main() -> int:
    """Run the party, take the picture, remove everything."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=120.0, help="party length (default 120)")
    ap.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "status-page.png", help="PNG to write"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("needs root to create network namespaces (sudo .venv/bin/python ...)")
    for tool in ("ip", "chromium"):
        if shutil.which(tool) is None:
            ap.error(f"needs {tool} on PATH (scripts/test.sh installs it)")
    if args.seconds < 50:
        ap.error("--seconds must be at least 50: the last player leaves at 40 s")

    # Namespaces a run that was killed left behind: remove them first.
    Netns(prefix=PREFIX, names=sorted(n for n in namespaces() if n.startswith(PREFIX))).close()
    net = Netns(prefix=PREFIX)
    party: Party | None = None
    bridge: BridgeProcess | None = None
    with tempfile.TemporaryDirectory(prefix="status-screenshot-") as tmp:
        work = Path(tmp)
        try:
            box, pcs = build_lan(net, len(PLAYERS))
            bridge = BridgeProcess(net, box, "--iface", "lan", "--iface", "vpn0", log_dir=work)
            searchers = [
                Searcher(f"{PREFIX}_home", f"{VPN}.255", STAR_TREK_ARMADA, 0.5),
                Searcher(pcs[-1], f"{LAN}.255", TOTAL_ANNIHILATION, 1.5),
            ]
            party = Party(pcs[:-1], searchers)
            party.thread.start()
            print(f"party running for {args.seconds:.0f} s ...", flush=True)
            party.thread.join(args.seconds)
            party.check()
            screenshot(net, box, work / "chromium-profile", args.out)
            party.check()
            print(f"wrote {args.out}")
        except BaseException:
            if bridge is not None:
                print(bridge.log()[-3000:], file=sys.stderr)
            raise
        finally:
            if party is not None:
                party.close()
            if bridge is not None and bridge.stop() != 0:
                print(f"the bridge exited {bridge.proc.returncode}", file=sys.stderr)
            net.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
