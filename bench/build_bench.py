#!/usr/bin/env python3
"""The pure layers' per-packet cost, compiled (mypyc) and pure Python, side by side.

    python3 bench/build_bench.py [--rounds 5] [--packets 20000]

What ``setup.py`` compiles is the decision and the codecs; the rest of a packet's cost is the
I/O around them (asyncio, sockets, the books), which stays Python in both builds. This bench
times the compiled part alone, in a loop with no I/O, so the whole-bridge figures of
``ipx_bench.py`` and ``relay_bench.py`` can be read against it:

* ``switch``: ``IpxSwitch.handle`` of a DOSBox client's 64-byte broadcast, 16 verified
  clients (the IPX bench's 16 x N load, one datagram's decision: rule checks, 15 targets);
* ``decide``: ``RelayPolicy.decide`` of a DirectPlay 4 broadcast between two LANs (what the
  relay's Python path decides per datagram, every rule);
* ``parse``: ``wire.ipx.parse_header`` of the same broadcast.

Each build runs in its own interpreter: this checkout as it is (compiled when ``setup.py``
could build it, which the output says) and a copy of its ``ipxbridge/`` without the
extension modules (pure). Prints µs per call, the median over rounds with the range, and the
ratio pure / compiled. No network, no root.
"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Runs inside each interpreter (PYTHONPATH = the tree); prints one JSON line.
CHILD = r"""
import json, sys, time
from ipaddress import IPv4Network
from ipxbridge import build
from ipxbridge.policy.relay import Egress, RelayPolicy, RelaySettings, SourceMode
from ipxbridge.policy.switch import IpxSwitch, SwitchSettings
from ipxbridge.wire import ipx

rounds, packets = int(sys.argv[1]), int(sys.argv[2])
SERVER = bytes.fromhex("02000000beef")
clients = [(f"10.0.0.{10 + i}", 5000 + i) for i in range(16)]
switch = IpxSwitch(
    SwitchSettings(clients_allow=(IPv4Network("10.0.0.0/24"),)), (), lambda _a: SERVER
)
nodes = {}
for c in clients:
    reply = switch.handle(ipx.build_registration(), c, 0.0).replies[0][0]
    nodes[c] = ipx.parse_header(reply).dst_node
for c in clients:  # each answers the bridge's ping, as DOSBox does: verified
    switch.handle(ipx.build_ping_reply(SERVER, nodes[c]), c, 0.5)
assert all(switch.clients[c].verified for c in clients), "clients not verified"
broadcasts = [
    (c, ipx.build_packet(dst_node=ipx.BROADCAST_NODE, dst_socket=0x4000, src_node=nodes[c],
                         src_socket=0x4000, payload=bytes([i % 256]) * 64))
    for i, c in enumerate(clients)
]
lan_a = Egress(2, "lanA", "lan", "10.1.0.1", "10.1.0.255", networks=("10.1.0.1/24",),
               addresses=("10.1.0.1",))
lan_b = Egress(3, "lanB", "lan", "10.2.0.1", "10.2.0.255", networks=("10.2.0.1/24",),
               addresses=("10.2.0.1",))
policy = RelayPolicy(RelaySettings(source_mode=SourceMode.PRESERVE))
policy.set_plan((lan_a, lan_b), frozenset({"10.1.0.1", "10.2.0.1"}),
                {2: frozenset({"10.1.0.255"}), 3: frozenset({"10.2.0.255"})})
game = bytes(64)  # a 64-byte datagram to the DirectPlay port, as the relay bench sends

def time_switch():
    t, n = 1.0, len(broadcasts)
    started = time.perf_counter()
    for i in range(packets):
        src, data = broadcasts[i % n]
        t += 0.0001
        d = switch.handle(data, src, t)
    assert len(d.targets) == 15, d
    return (time.perf_counter() - started) / packets * 1e6

def time_decide():
    started = time.perf_counter()
    for i in range(packets):
        d = policy.decide(game, src=("10.1.0.%d" % (10 + i % 200), 40000 + i % 1000),
                          dst_ip="10.1.0.255", dst_port=47624, ingress=2, ttl=64,
                          now=1.0 + i * 0.0001, tos=0)
    return (time.perf_counter() - started) / packets * 1e6

def time_parse():
    data = broadcasts[0][1]
    started = time.perf_counter()
    for _ in range(packets):
        ipx.parse_header(data)
    return (time.perf_counter() - started) / packets * 1e6

out = {"build": build.build(), "switch": [], "decide": [], "parse": []}
for _ in range(rounds):
    out["switch"].append(time_switch())
    out["decide"].append(time_decide())
    out["parse"].append(time_parse())
print(json.dumps(out))
"""


def measure(tree: Path, rounds: int, packets: int) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, "-P", "-c", CHILD, str(rounds), str(packets)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        cwd=tree,
        timeout=600,
        check=False,
    )
    if res.returncode != 0:
        raise SystemExit(f"{tree}: {res.stderr.strip()}")
    data: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--packets", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ipxbridge-pure-") as tmp:
        pure_tree = Path(tmp)
        shutil.copytree(
            ROOT / "ipxbridge",
            pure_tree / "ipxbridge",
            ignore=shutil.ignore_patterns("*.so", "__pycache__"),
        )
        results = {
            "this checkout": measure(ROOT, args.rounds, args.packets),
            "pure copy": measure(pure_tree, args.rounds, args.packets),
        }
    here, pure = results["this checkout"], results["pure copy"]
    print(f"{args.rounds} rounds of {args.packets:,} calls; µs per call, median [range]")
    print(f"this checkout: {here['build']} build; the copy: {pure['build']}")
    print(f"| call | {here['build']} | {pure['build']} | ratio pure / {here['build']} |")
    print("|---|---|---|---|")
    for name in ("switch", "decide", "parse"):
        a, b = here[name], pure[name]
        ma, mb = statistics.median(a), statistics.median(b)
        print(
            f"| {name} | {ma:.2f} [{min(a):.2f}-{max(a):.2f}] | {mb:.2f} "
            f"[{min(b):.2f}-{max(b):.2f}] | {mb / ma:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
