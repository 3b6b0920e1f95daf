"""Several bridges wired back to back in memory (aioquic ``roundtrip`` style), no sockets.

Checks loop behaviour on a full mesh of bridges, where "broadcast to all but the ingress"
would otherwise circulate for ever (docs/reliability.md L9, R5).
"""

from collections import Counter, deque
from collections.abc import Callable

from ipxbridge.policy.switch import Address, IpxSwitch, Outcome, SwitchSettings
from ipxbridge.wire import ipx

BRIDGES: list[Address] = [("192.0.2.1", 213), ("192.0.2.2", 213), ("192.0.2.3", 213)]


def constant(addr: Address) -> Callable[[Address], bytes]:
    node = ipx.dosbox_node(*addr)
    return lambda _a: node


# Each client's bridge and the node it was given (from its registration reply).
Mesh = tuple[dict[Address, IpxSwitch], dict[Address, tuple[Address, bytes]]]


def build_mesh(dedup_window: float = 2.0) -> Mesh:
    switches: dict[Address, IpxSwitch] = {}
    clients: dict[Address, tuple[Address, bytes]] = {}
    for i, me in enumerate(BRIDGES):
        peers = tuple(b for b in BRIDGES if b != me)
        sw = IpxSwitch(SwitchSettings(dedup_window=dedup_window), peers, constant(me))
        client = (f"10.0.{i}.10", 5000 + i)
        ((reply, _),) = sw.handle(ipx.build_registration(), client, 0.0).replies
        switches[me] = sw
        clients[client] = (me, ipx.parse_header(reply).dst_node)
    # Each game announces itself once as it starts, as games do before they listen; the
    # packet carries its keyed node, which verifies it (policy/switch.py rule 2).
    for client, (bridge, node) in clients.items():
        run(switches, (broadcast(node, b"here"), client, bridge), 0.0)
    return switches, clients


def run(
    switches: dict[Address, IpxSwitch],
    start: tuple[bytes, Address, Address],
    now: float,
    limit: int = 10_000,
) -> tuple[Counter[Address], int]:
    """Deliver until quiet. Returns packets each client got, and bridge-to-bridge sends."""
    queue: deque[tuple[bytes, Address, Address]] = deque([start])  # (data, from, to-bridge)
    delivered: Counter[Address] = Counter()
    inter_bridge = 0
    steps = 0
    while queue and steps < limit:
        steps += 1
        data, src, bridge = queue.popleft()
        d = switches[bridge].handle(data, src, now)
        if d.outcome is not Outcome.FORWARDED:
            continue
        assert d.packet is not None
        for target in d.targets:
            assert isinstance(target, tuple)  # no interface ports in this mesh
            if target in switches:
                inter_bridge += 1
                queue.append((d.packet, bridge, target))
            else:
                delivered[target] += 1
    assert steps < limit, "storm did not end"
    return delivered, inter_bridge


def first_client_broadcast(
    clients: dict[Address, tuple[Address, bytes]],
) -> tuple[Address, Address, bytes]:
    """The first client, its bridge, and a broadcast from it."""
    sender = next(iter(clients))
    bridge, node = clients[sender]
    return sender, bridge, broadcast(node, b"hi")


def broadcast(node: bytes, payload: bytes) -> bytes:
    return ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=0x4545,
        src_node=node,
        src_socket=0x4545,
        payload=payload,
    )


def test_full_mesh_broadcast_reaches_each_client_once_and_storm_ends() -> None:
    switches, clients = build_mesh()
    sender, bridge, pkt = first_client_broadcast(clients)
    delivered, inter = run(switches, (pkt, sender, bridge), 1.0)
    others = [c for c in clients if c != sender]
    assert delivered == Counter(dict.fromkeys(others, 1))
    # 2 copies from the origin, then each other bridge relays once to the third: 4 in all.
    assert inter <= 4


def test_identical_retries_half_a_second_apart_all_delivered() -> None:
    switches, clients = build_mesh()
    sender, bridge, pkt = first_client_broadcast(clients)
    total: Counter[Address] = Counter()
    for i in range(20):
        delivered, _ = run(switches, (pkt, sender, bridge), 1.0 + 0.5 * i)
        total.update(delivered)
    assert all(total[c] == 20 for c in clients if c != sender)


def test_without_dedup_hop_count_still_ends_the_storm() -> None:
    switches, clients = build_mesh(dedup_window=0.0)
    sender, bridge, pkt = first_client_broadcast(clients)
    delivered, inter = run(switches, (pkt, sender, bridge), 1.0, limit=1_000_000)
    assert inter > 4  # it does loop...
    assert sum(delivered.values()) > 0  # ...but ends, bounded by the 16-hop rule
