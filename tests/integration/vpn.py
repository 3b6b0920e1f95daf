"""Real VPN programs (OpenVPN, tinc 1.0, Nebula, wireguard-go) in test namespaces, set up
as the bridge's users set them up, and a stand-in LAN game that looks for hosts across them.

Everything lives in namespaces made for the test and in a directory the test owns; the only
shared paths are the OpenVPN status files (``/run/openvpn-server/status-<prefix>-<dev>.log``,
where Debian's openvpn-server@.service writes them) and wireguard-go's UAPI sockets
(``/var/run/wireguard/<ifname>.sock``), both named uniquely by the caller.

The game (``Host``, ``find_hosts``, ``dp4_search``) is the smallest thing that behaves like a
LAN game's discovery: a player broadcasts to 255.255.255.255:47624 from a fixed port on one
device, and a host answers each datagram with a unicast to the sender's address and port; a
DirectPlay 4 host answers EnumSessions over TCP to the SOCKADDR's address, which with
0.0.0.0 is the packet's IP source (tests/integration/test_relay.py does the same by hand).
"""

import contextlib
import ipaddress
import json
import os
import re
import select
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ipxbridge.wire.directplay import (
    DP4Message,
    EnumSessions,
    EnumSessionsReply,
    SessionDesc,
    SockAddr,
    build_enum_sessions,
    build_enum_sessions_reply,
    parse_dplay,
)
from ipxbridge.wire.errors import WireError
from scripts.harness import LoggedProcess, Netns, bridge_get, inside, sh
from tests.integration import wg

GAME_PORT: Final = 47624  # DirectPlay 4's enumeration port, one of the relay's defaults
SO_BINDTODEVICE: Final = 25  # asm-generic/socket.h (socket.SO_BINDTODEVICE is not everywhere)
FIND: Final = b"ixv-find "  # a player's plain datagram: FIND + sequence number
ANSWER: Final = b"ixv-here "  # a host's answer: ANSWER + the datagram it answers
TCP_POOL: Final = 16  # TCP sockets a host makes up front for DirectPlay 4 answers


# --- namespaces ---------------------------------------------------------------------------


def unique_tag() -> str:
    """Five digits of this process's id: interface and file names unique on the machine."""
    return f"{os.getpid() % 100000:05d}"


def addr(ns: str, ifname: str, cidr: str) -> None:
    """Add ``cidr`` (with its computed broadcast) to ``ifname`` and bring it up."""
    sh("ip", "-n", ns, "addr", "add", cidr, "brd", "+", "dev", ifname)
    sh("ip", "-n", ns, "link", "set", ifname, "up")


def veth(ns_a: str, if_a: str, ns_b: str, if_b: str) -> None:
    """A veth pair between two namespaces, no addresses, both ends up."""
    pair = ["type", "veth", "peer", "name", if_b, "netns", ns_b]
    sh("ip", "link", "add", if_a, "netns", ns_a, *pair)
    sh("ip", "-n", ns_a, "link", "set", if_a, "up")
    sh("ip", "-n", ns_b, "link", "set", if_b, "up")


def switch(ns: str, name: str, cidr: str) -> None:
    """A Linux bridge ``name`` in ``ns`` holding ``cidr``: an underlay switch for the VPN."""
    sh("ip", "-n", ns, "link", "add", "name", name, "type", "bridge")
    addr(ns, name, cidr)


def plug(ns_switch: str, switch_name: str, port: str, ns: str, ifname: str, cidr: str) -> None:
    """Connect ``ns`` to the bridge ``switch_name`` in ``ns_switch`` by a veth pair."""
    veth(ns_switch, port, ns, ifname)
    sh("ip", "-n", ns_switch, "link", "set", port, "master", switch_name)
    addr(ns, ifname, cidr)


def router(ns: str) -> None:
    """``ns`` forwards IPv4 (the bridge's box; preserve mode needs it)."""
    sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")


def lan(box: str, box_if: str, station: str, prefix: str) -> None:
    """A LAN ``prefix`` (a /24): ``box`` is .1 on ``box_if``, ``station`` .10 on eth0, with a
    default route via the box."""
    base = ipaddress.IPv4Network(prefix)
    veth(box, box_if, station, "eth0")
    addr(box, box_if, f"{base[1]}/{base.prefixlen}")
    addr(station, "eth0", f"{base[10]}/{base.prefixlen}")
    sh("ip", "-n", station, "route", "add", "default", "via", str(base[1]))


def wait_reach(src_ns: str, dst_ns: str, dst_ip: str, timeout: float = 15.0) -> float:
    """Send UDP from ``src_ns`` to ``dst_ip`` (in ``dst_ns``) until a datagram gets there and
    its answer gets back (a tunnel's first handshake, routes both ways); seconds taken."""
    started = time.monotonic()
    src, dst = udp_socket(src_ns, 0), udp_socket(dst_ns, 0)
    src.settimeout(0.3)
    dst.settimeout(0.3)
    try:
        while time.monotonic() - started < timeout:
            try:
                src.sendto(b"reach?", (dst_ip, dst.getsockname()[1]))
            except OSError:  # no route yet: the VPN's up script has not run
                time.sleep(0.1)
                continue
            try:
                _, back = dst.recvfrom(100)
                dst.sendto(b"reach!", back)
                if src.recvfrom(100)[0] == b"reach!":
                    return time.monotonic() - started
            except TimeoutError:
                continue
    finally:
        src.close()
        dst.close()
    routes = sh("ip", "-n", src_ns, "route", check=False).stdout
    raise TimeoutError(f"{dst_ip} not reached from {src_ns} in {timeout}s; its routes:\n{routes}")


# --- daemons ------------------------------------------------------------------------------


class Daemon(LoggedProcess):
    """A VPN program running in a namespace in the foreground, its output in a log file."""

    def __init__(self, net: Netns, ns: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = f"{Path(argv[0]).name}@{ns}"
        self._start(net.exec_args(ns, *argv), log_path, stdin=subprocess.DEVNULL)

    def wait_for(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        return super().wait_for(pattern, timeout)

    def stop(self, grace: float = 5.0) -> int:
        return super().stop(grace)


def stop_all(daemons: Iterable[Daemon]) -> None:
    """Stop every daemon, whatever the others do."""
    for daemon in daemons:
        with contextlib.suppress(Exception):
            daemon.stop()


# --- the stand-in game --------------------------------------------------------------------


def udp_socket(ns: str, port: int, device: str | None = None) -> socket.socket:
    """A UDP socket in ``ns`` bound to ``port``, allowed to broadcast, bound to ``device``."""
    with inside(ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if device:
        sock.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, device.encode())
    sock.bind(("0.0.0.0", port))
    return sock


class Host:
    """A game host in ``ns``: answers every datagram on ``GAME_PORT`` with a unicast to its
    sender, and a DirectPlay 4 EnumSessions as a real DP4 host does, by TCP to the SOCKADDR
    (0.0.0.0: the packet's IP source). It never sends first. ``received`` holds every
    datagram that reached it (the relay's copies, counted for the books)."""

    def __init__(self, ns: str, name: str) -> None:
        self.name = name
        self.sock = udp_socket(ns, GAME_PORT)
        self.sock.settimeout(0.05)
        with inside(ns):
            self._tcp = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(TCP_POOL)]
        self.received: list[tuple[bytes, tuple[str, int]]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"host-{name}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, src = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            self.received.append((data, src))
            try:
                msg = parse_dplay(data)
            except WireError:
                msg = None
            if isinstance(msg, DP4Message) and isinstance(msg.parsed, EnumSessions):
                threading.Thread(target=self._answer_dp4, args=(msg, src), daemon=True).start()
            else:
                with contextlib.suppress(OSError):
                    self.sock.sendto(ANSWER + data, src)

    def _answer_dp4(self, msg: DP4Message, src: tuple[str, int]) -> None:
        assert msg.header is not None
        assert isinstance(msg.parsed, EnumSessions)
        where = msg.header.sockaddr
        target = src[0] if where.address == "0.0.0.0" else where.address
        desc = SessionDesc(0, uuid.uuid4(), msg.parsed.application_guid, 8, 1, (0, 0, 0, 0))
        reply = build_enum_sessions_reply(
            EnumSessionsReply(desc, self.name), sockaddr=SockAddr(2, 2300, "0.0.0.0")
        )
        try:
            tcp = self._tcp.pop()
        except IndexError:
            self.errors.append("out of TCP sockets")
            return
        try:
            tcp.settimeout(3.0)
            tcp.connect((target, where.port))
            tcp.sendall(reply)
        except OSError as exc:
            self.errors.append(f"TCP to {target}:{where.port}: {exc}")
        finally:
            tcp.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()
        for tcp in self._tcp:
            tcp.close()


@contextlib.contextmanager
def hosts(*where: tuple[str, str]) -> Iterator[list[Host]]:
    """``Host``s in the given (namespace, name) places, closed afterwards."""
    made: list[Host] = []
    try:
        for ns, name in where:
            made.append(Host(ns, name))
        yield made
    finally:
        for host in made:
            host.close()


def find_hosts(
    ns: str,
    device: str,
    port: int,
    *,
    count: int = 20,
    label: str = "",
    interval: float = 0.05,
    expect: int = 1,
    linger: float = 1.0,
) -> dict[str, set[int]]:
    """A player in ``ns`` on ``device``: ``count`` broadcasts to 255.255.255.255:GAME_PORT
    from ``port``, ``interval`` apart; returns the sequence numbers answered, by the
    answering address. Waits up to ``linger`` after the last for ``expect`` hosts to answer
    them all. ``label`` makes the payloads unique to this search: a relay's loop filter
    (policy/dedup.py) takes an identical payload seen earlier with a higher TTL for a loop
    copy, whoever sent it."""
    sock = udp_socket(ns, port, device)
    answers: dict[str, set[int]] = {}
    lead = ANSWER + FIND + label.encode() + b" "

    def read_until(deadline: float) -> None:
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([sock], [], [], left)
            if not ready:
                return
            data, src = sock.recvfrom(65535)
            if data.startswith(lead):
                with contextlib.suppress(ValueError):
                    answers.setdefault(src[0], set()).add(int(data[len(lead) :]))

    try:
        for seq in range(count):
            sock.sendto(lead[len(ANSWER) :] + b"%d" % seq, ("255.255.255.255", GAME_PORT))
            read_until(time.monotonic() + interval)
        deadline = time.monotonic() + linger
        while time.monotonic() < deadline:
            done = [a for a in answers.values() if len(a) == count]
            if len(done) >= expect:
                break
            read_until(min(deadline, time.monotonic() + 0.05))
    finally:
        sock.close()
    return answers


def dp4_enum(guid: uuid.UUID, tcp_port: int) -> bytes:
    """A DirectPlay 4 EnumSessions whose SOCKADDR says 0.0.0.0:``tcp_port`` (answer me)."""
    return build_enum_sessions(
        EnumSessions(guid, 0x81, None), sockaddr=SockAddr(2, tcp_port, "0.0.0.0")
    )


def dp4_search(
    ns: str,
    device: str,
    port: int,
    tcp_port: int,
    *,
    count: int = 5,
    interval: float = 0.1,
    expect: int = 1,
    linger: float = 1.5,
) -> dict[str, set[uuid.UUID]]:
    """A DirectPlay 4 player in ``ns``: ``count`` EnumSessions broadcasts from ``port`` on
    ``device``, each with a new application GUID, answers taken on TCP ``tcp_port``;
    returns the GUIDs answered, by the answering host's address."""
    guids = [uuid.uuid4() for _ in range(count)]
    with inside(ns):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", tcp_port))
    listener.listen(16)
    sock = udp_socket(ns, port, device)
    answers: dict[str, set[uuid.UUID]] = {}

    def accept_until(deadline: float) -> None:
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([listener], [], [], left)
            if not ready:
                return
            conn, (peer, _) = listener.accept()
            with conn:
                conn.settimeout(2.0)
                chunks = []
                with contextlib.suppress(OSError):
                    while chunk := conn.recv(65535):
                        chunks.append(chunk)
            try:
                msg = parse_dplay(b"".join(chunks))
            except WireError:
                continue
            if isinstance(msg, DP4Message) and isinstance(msg.parsed, EnumSessionsReply):
                guid = msg.parsed.desc.application_guid
                if guid in guids:
                    answers.setdefault(peer, set()).add(guid)

    try:
        for guid in guids:
            sock.sendto(dp4_enum(guid, tcp_port), ("255.255.255.255", GAME_PORT))
            accept_until(time.monotonic() + interval)
        deadline = time.monotonic() + linger
        while time.monotonic() < deadline:
            if len([a for a in answers.values() if len(a) == count]) >= expect:
                break
            accept_until(min(deadline, time.monotonic() + 0.05))
    finally:
        sock.close()
        listener.close()
    return answers


class Capture:
    """Every UDP datagram to ``port`` arriving on ``ifname`` in ``ns`` as the wire carries it
    (AF_PACKET; what ``ns`` itself sends is left out): the raw listener of the storm test."""

    def __init__(self, ns: str, ifname: str, port: int = GAME_PORT) -> None:
        self.port = port
        with inside(ns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0003))
        self.sock.bind((ifname, 0x0003))
        self.sock.settimeout(0.1)

    def read(self, seconds: float) -> list[bytes]:
        """UDP payloads to the port seen within ``seconds``."""
        seen: list[bytes] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                frame, (_, proto, pkttype, *_) = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            if proto != 0x0800 or pkttype == socket.PACKET_OUTGOING or frame[9] != 17:
                continue
            ihl = (frame[0] & 0x0F) * 4
            if struct.unpack_from("!H", frame, ihl + 2)[0] == self.port:
                seen.append(frame[ihl + 8 :])
        return seen

    def close(self) -> None:
        self.sock.close()


# --- the bridge's books -------------------------------------------------------------------


@dataclass
class Books:
    """The relay's numbers from one read of the bridge's /metrics."""

    received: float = 0.0  # ipxbridge_received_packets_total{path="relay"}, all interfaces
    relayed: float = 0.0  # ipxbridge_forwarded_packets_total{path="relay"}
    dropped: float = 0.0  # ipxbridge_dropped_packets_total{path="relay"}, all reasons
    kernel: float = 0.0  # ipxbridge_kernel_dropped_packets_total{path="relay"}
    fastpath: dict[str, float] = field(default_factory=dict)  # by reason (never received)
    reasons: dict[str, float] = field(default_factory=dict)  # dropped, by reason
    copies: dict[str, float] = field(default_factory=dict)  # ipxbridge_sent_copies_total
    received_by: dict[str, float] = field(default_factory=dict)  # received, by interface

    @classmethod
    def read(cls, ns: str) -> "Books":
        books = cls()
        for line in bridge_get(ns, "/metrics").splitlines():
            if line.startswith("#") or "{" not in line:
                continue
            series, number = line.rsplit(" ", 1)
            name, _, rest = series.partition("{")
            labels = dict(re.findall(r'(\w+)="([^"]*)"', rest))
            value = float(number)
            if name == "ipxbridge_fastpath_dropped_packets_total":
                books.fastpath[labels["reason"]] = value
            if labels.get("path") != "relay":
                continue
            if name == "ipxbridge_received_packets_total":
                books.received += value
                books.received_by[labels["interface"]] = value
            elif name == "ipxbridge_forwarded_packets_total":
                books.relayed += value
            elif name == "ipxbridge_dropped_packets_total":
                books.dropped += value
                books.reasons[labels["reason"]] = value
            elif name == "ipxbridge_kernel_dropped_packets_total":
                books.kernel += value
            elif name == "ipxbridge_sent_copies_total":
                books.copies[labels["interface"]] = value
        return books

    def since(self, before: "Books") -> "Books":
        """What changed since ``before``."""

        def minus(now: Mapping[str, float], then: Mapping[str, float]) -> dict[str, float]:
            keys = {*now, *then}
            return {k: now.get(k, 0.0) - then.get(k, 0.0) for k in keys if now.get(k, 0.0)}

        return Books(
            self.received - before.received,
            self.relayed - before.relayed,
            self.dropped - before.dropped,
            self.kernel - before.kernel,
            minus(self.fastpath, before.fastpath),
            minus(self.reasons, before.reasons),
            minus(self.copies, before.copies),
            minus(self.received_by, before.received_by),
        )


def settled_books(ns: str, before: Books, copies: Mapping[str, int], timeout: float = 8.0) -> Books:
    """The books' change since ``before`` once the copies per egress say ``copies`` (the fast
    path's counters are read every 5 s, app/relay.py KERNEL_READ_SECONDS), or at
    ``timeout``; then once more, 0.3 s later, so a late extra copy shows."""
    want = {k: float(v) for k, v in copies.items() if v}
    deadline = time.monotonic() + timeout
    while True:
        delta = Books.read(ns).since(before)
        if delta.copies == want or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    time.sleep(0.3)
    return Books.read(ns).since(before)


# --- OpenVPN ------------------------------------------------------------------------------

STATUS_DIR: Final = Path("/run/openvpn-server")  # Debian's openvpn-server@.service


def _openssl(*args: str, cwd: Path) -> None:
    res = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )
    if res.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {res.stderr}")


def openvpn_pki(where: Path, server: str, clients: Sequence[str]) -> None:
    """A CA and EC (P-256) certificates for ``server`` and ``clients`` in ``where``, made
    with openssl offline in well under a second: ``ca.crt``, ``NAME.crt``, ``NAME.key``."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=ixv-ca",
        cwd=where,
    )
    for name, usage in [(server, "serverAuth"), *((c, "clientAuth") for c in clients)]:
        ext = where / f"{name}.ext"
        ext.write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyAgreement\n"
            f"extendedKeyUsage={usage}\n"
        )
        _openssl(
            "req",
            "-new",
            *ec,
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={name}",
            cwd=where,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            ext.name,
            "-out",
            f"{name}.crt",
            cwd=where,
        )


def status_path(prefix: str, dev: str) -> Path:
    """Where the server's status file goes, named by the test's namespace prefix."""
    return STATUS_DIR / f"status-{prefix}-{dev}.log"


def openvpn_server(
    net: Netns,
    ns: str,
    where: Path,
    *,
    dev: str,
    dev_type: str,
    network: str,
    local: str,
    clients: Mapping[str, str],
    routes: Sequence[str] = (),
) -> Daemon:
    """An OpenVPN 2.6 server (``server NET MASK``, UDP on ``local``:1194) for ``clients``
    (common name -> fixed tunnel address, by client-config-dir), pushing ``routes``.

    Started as Debian's openvpn-server@.service starts it: ``--status
    /run/openvpn-server/status-<...>.log 1 --status-version 2``. No client-to-client: a
    client's packet always goes up the server's tun/tap (src/openvpn/multi.c).
    """
    net_ip = ipaddress.IPv4Network(network)
    ccd = where / "ccd"
    ccd.mkdir(exist_ok=True)
    for name, ip in clients.items():
        (ccd / name).write_text(f"ifconfig-push {ip} {net_ip.netmask}\n")
    conf = [
        f"dev {dev}",
        f"dev-type {dev_type}",
        "proto udp",
        f"local {local}",
        "port 1194",
        f"server {net_ip.network_address} {net_ip.netmask}",
        "topology subnet",
        f"client-config-dir {ccd}",
        "ca ca.crt",
        "cert server.crt",
        "key server.key",
        "dh none",
        "keepalive 10 60",
        "disable-dco",  # no ovpn-dco module here; the userspace data path is what's tested
        "verb 3",
        *(
            f'push "route {r.network_address} {r.netmask}"'
            for r in map(ipaddress.IPv4Network, routes)
        ),
    ]
    (where / "server.conf").write_text("\n".join(conf) + "\n")
    status = status_path(net.prefix, dev)
    argv = ["openvpn", "--cd", str(where), "--config", "server.conf"]
    argv += ["--status", str(status), "1", "--status-version", "2"]
    return Daemon(net, ns, argv, where / "server.log")


def openvpn_client(
    net: Netns, ns: str, where: Path, *, name: str, dev: str, dev_type: str, remote: str
) -> Daemon:
    """An OpenVPN client ``name`` (its certificate in ``where``) of the server at ``remote``."""
    conf = [
        "client",
        f"dev {dev}",
        f"dev-type {dev_type}",
        "proto udp",
        f"remote {remote} 1194",
        "nobind",
        "ca ca.crt",
        f"cert {name}.crt",
        f"key {name}.key",
        "remote-cert-tls server",
        "disable-dco",
        "verb 3",
    ]
    (where / f"{name}.conf").write_text("\n".join(conf) + "\n")
    return Daemon(
        net, ns, ["openvpn", "--cd", str(where), "--config", f"{name}.conf"], where / f"{name}.log"
    )


OPENVPN_READY: Final = r"Initialization Sequence Completed"


def wait_status_lists(path: Path, addresses: Iterable[str], timeout: float = 10.0) -> str:
    """The status file once its CLIENT_LIST rows name every address (version 2 format)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            text = path.read_text()
        listed = {row.split(",")[3] for row in text.splitlines() if row.startswith("CLIENT_LIST,")}
        if set(addresses) <= listed:
            return text
        time.sleep(0.1)
    raise TimeoutError(f"{path} does not list {sorted(addresses)} after {timeout}s:\n{text}")


def make_status_dir() -> bool:
    """Make ``STATUS_DIR`` if there is none (as systemd's RuntimeDirectory would); whether
    this made it."""
    try:
        STATUS_DIR.mkdir()
    except FileExistsError:
        return False
    return True


def remove_status(path: Path, *, made_dir: bool) -> None:
    """Remove a status file, and the directory if ``make_status_dir`` made it and nothing
    else is in it now."""
    path.unlink(missing_ok=True)
    if made_dir:
        with contextlib.suppress(OSError):
            STATUS_DIR.rmdir()


# --- tinc 1.0 -----------------------------------------------------------------------------

ETC_NETNS: Final = Path("/etc/netns")


def etc_of(ns: str) -> Path:
    """The namespace's own /etc: ``ip netns exec NS`` bind-mounts each entry of
    /etc/netns/NS over /etc (ip-netns(8)), so a daemon and a bridge started in NS read their
    configuration where Debian's units put it, apart from every other namespace's. The
    entry's target (/etc/tinc, /etc/nebula: made by the packages) must exist.
    Netns.close removes the directory."""
    return ETC_NETNS / ns


@dataclass
class TincNode:
    """One tinc 1.0 daemon: its name, namespace, tunnel address and what it routes."""

    name: str
    ns: str
    ifname: str
    address: str  # tunnel address (a /24 in the VPN)
    underlay: str  # where the others reach it (UDP and TCP 655)
    subnets: tuple[str, ...] = ()  # router mode: the tinc Subnets it owns
    routes: tuple[str, ...] = ()  # prefixes routed into the VPN by tinc-up
    connect_to: tuple[str, ...] = ()
    net: str = ""  # the tinc net's name (unit tinc@NET); "" is ifname, tincd's default then


def tinc_network(net: Netns, nodes: Sequence[TincNode], *, mode: str) -> list[Daemon]:
    """Configure and start ``nodes`` as one tinc 1.0 VPN in ``mode`` (router or switch), as
    Debian's ``tinc@NET`` unit runs it: ``tincd -n NET -D`` reading /etc/tinc/NET.

    Keys are 1024-bit RSA made by ``tincd -K`` (it asks nothing when stdin is not a tty);
    each node's host file (Address, Subnet, public key) is copied to every other node. A
    node whose net is named after its interface has no ``Interface`` line (tincd names the
    interface after the net).
    """
    via = {n.name: n for n in nodes}
    confs = {n.name: etc_of(n.ns) / "tinc" / (n.net or n.ifname) for n in nodes}
    for node in nodes:
        conf = confs[node.name]
        (conf / "hosts").mkdir(parents=True)
        lines = [f"Name = {node.name}", f"Mode = {mode}"]
        if node.net and node.net != node.ifname:
            lines.append(f"Interface = {node.ifname}")
        lines += [f"ConnectTo = {other}" for other in node.connect_to]
        (conf / "tinc.conf").write_text("\n".join(lines) + "\n")
        host = [f"Address = {node.underlay}", *(f"Subnet = {s}" for s in node.subnets)]
        (conf / "hosts" / node.name).write_text("\n".join(host) + "\n")
        up = [
            "#!/bin/sh",
            f"ip addr add {node.address}/24 dev $INTERFACE",
            "ip link set $INTERFACE up",
        ]
        gateway = via[node.connect_to[0]].address if node.connect_to else ""
        for prefix in node.routes:
            if mode == "router":
                up.append(f"ip route add {prefix} dev $INTERFACE")
            else:
                up.append(f"ip route add {prefix} via {gateway}")
        (conf / "tinc-up").write_text("\n".join(up) + "\n")
        (conf / "tinc-up").chmod(0o755)
        res = subprocess.run(
            ["tincd", "-c", str(conf), "-K1024"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
            check=False,
        )
        if res.returncode != 0:
            raise RuntimeError(f"tincd -K failed: {res.stderr!r}")
    for node in nodes:
        for other in nodes:
            if other is not node:
                shutil.copy(confs[other.name] / "hosts" / other.name, confs[node.name] / "hosts")
    # EXTRA="-d 1" (/etc/default/tinc): the connections in the log. The pid file is tincd's
    # default, /run/tinc.NET.pid: the nets' names are the tests' own.
    return [
        Daemon(
            net,
            node.ns,
            ["tincd", "-n", node.net or node.ifname, "-D", "-d", "1"],
            confs[node.name].parent / f"{node.net or node.ifname}.log",
        )
        for node in nodes
    ]


# --- Nebula -------------------------------------------------------------------------------


@dataclass
class NebulaNode:
    """One Nebula 1.6 node."""

    name: str
    ns: str
    dev: str
    address: str  # its Nebula address, e.g. 10.85.0.2 (the network is a /24)
    underlay: str
    lighthouse: bool = False
    subnets: tuple[str, ...] = ()  # certificate -subnets: inner sources it may use
    unsafe_routes: tuple[tuple[str, str], ...] = ()  # (prefix, via Nebula address)


NEBULA_LAUNCHER: Final = "/usr/lib/nebula/bin/nebula-systemd-launcher"


def nebula_network(net: Netns, where: Path, nodes: Sequence[NebulaNode]) -> list[Daemon]:
    """A CA, certificates and a config for each node (nebula-cert ca/sign), then nebula as
    Debian's ``nebula@NAME`` unit runs it: its launcher, which reads /etc/nebula/NAME.yml
    (the node's name; in its namespace's /etc, ``etc_of``).

    The firewall lets any UDP and TCP in and out; the non-lighthouses find each other
    through the lighthouse, whose underlay address is in everyone's ``static_host_map``.
    Configs are JSON, which is YAML. Certificates and keys stay in ``where``.
    """
    sh(
        "nebula-cert",
        "ca",
        "-name",
        "ixv",
        "-duration",
        "48h",
        "-out-crt",
        str(where / "ca.crt"),
        "-out-key",
        str(where / "ca.key"),
    )
    lighthouses = [n for n in nodes if n.lighthouse]
    rules = [{"port": "any", "proto": p, "host": "any"} for p in ("udp", "tcp", "icmp")]
    daemons = []
    for node in nodes:
        sign = ["nebula-cert", "sign", "-name", node.name, "-ip", f"{node.address}/24"]
        sign += ["-ca-crt", str(where / "ca.crt"), "-ca-key", str(where / "ca.key")]
        sign += ["-out-crt", str(where / f"{node.name}.crt")]
        sign += ["-out-key", str(where / f"{node.name}.key")]
        if node.subnets:
            sign += ["-subnets", ",".join(node.subnets)]
        sh(*sign)
        config = {
            "pki": {
                "ca": str(where / "ca.crt"),
                "cert": str(where / f"{node.name}.crt"),
                "key": str(where / f"{node.name}.key"),
            },
            "static_host_map": {lh.address: [f"{lh.underlay}:4242"] for lh in lighthouses},
            "lighthouse": {
                "am_lighthouse": node.lighthouse,
                "interval": 60,
                "hosts": [] if node.lighthouse else [lh.address for lh in lighthouses],
            },
            "listen": {"host": node.underlay, "port": 4242},
            "punchy": {"punch": False},
            "tun": {
                "disabled": False,
                "dev": node.dev,
                "mtu": 1300,
                "unsafe_routes": [{"route": r, "via": v} for r, v in node.unsafe_routes],
            },
            "logging": {"level": "info", "format": "text"},
            "firewall": {
                "conntrack": {"tcp_timeout": "12m", "udp_timeout": "3m", "default_timeout": "10m"},
                "outbound": rules,
                "inbound": rules,
            },
        }
        path = etc_of(node.ns) / "nebula" / f"{node.name}.yml"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(config, indent=1))
        daemons.append(
            Daemon(net, node.ns, [NEBULA_LAUNCHER, node.name], where / f"{node.name}.log")
        )
    return daemons


NEBULA_READY: Final = r"Nebula interface is active"


# --- WireGuard (wireguard-go) -------------------------------------------------------------


@dataclass
class WgSite:
    """A site's wireguard-go end and the LAN behind it (its peers accept that LAN)."""

    end: wg.WgEnd
    lan: str  # e.g. 10.76.1.0/24


def wg_mesh(net: Netns, sites: Sequence[WgSite], where: Path) -> None:
    """Start wireguard-go at every site, each a peer of every other, AllowedIPs = the other's
    tunnel /32 and its LAN (the bridge reads its peers from the /32s), and route the other
    LANs into the tunnel. Underlay addresses must already route."""
    for site in sites:
        if not site.end.private:
            site.end.private, site.end.public = wg.genkey()
        wg.start(net, site.end)
    for site in sites:
        end = site.end
        key = where / f"{end.ifname}.key"
        key.write_text(end.private)
        args = ["wg", "set", end.ifname, "listen-port", str(end.port), "private-key", str(key)]
        for other in sites:
            if other is site:
                continue
            args += [
                "peer",
                other.end.public,
                "endpoint",
                f"{other.end.underlay_ip}:{other.end.port}",
            ]
            args += ["allowed-ips", f"{other.end.tunnel_ip}/32,{other.lan}"]
            args += ["persistent-keepalive", "1"]
        sh(*net.exec_args(end.ns, *args))
        addr(end.ns, end.ifname, f"{end.tunnel_ip}/24")
        for other in sites:
            if other is not site:
                sh("ip", "-n", end.ns, "route", "add", other.lan, "dev", end.ifname)
