"""The kernel fast path: nftables ``dup`` rules that ipxbridge installs, owns and reads.

Plain fan-out of a broadcast is a copy with a new destination; the kernel does that at line
rate (the "iptables TEE" trick, measured at 1.6x the naive Python relay here and ~33 us of
added latency). ipxbridge keeps everything else in Python: it still receives each original
for DirectPlay inspection, counts it, runs reply handling in rewrite mode (where the fast
path is not used), and reads the rules' counters for metrics.

Ruleset (table ``ip ipxbridge``, replaced atomically with ``nft -f`` on every plan change, so
a re-created interface gets rules for its new index; deleted on exit):

* chain ``fanout`` (prerouting, priority -300 = before conntrack): for each selected ingress
  interface, broadcasts (``pkttype broadcast``; on a p2p interface, datagrams to the bridge's
  own tunnel address) to a relay port, TTL > 1, *without* our DSCP mark, jump to ``in_<n>``.
* chain ``in_<n>``: set the mark, then per copy ``ip daddr set T ... dup to T device E``; at
  the end the original is restored to 255.255.255.255 and DSCP 0 and continues to local
  delivery (where the Python side inspects it).
* Copies carry the DSCP mark, and marked packets are never fanned out again — not by this box
  (the kernel loops broadcast copies back to local input) nor by another ipxbridge on the same
  segments: two bridges on parallel paths produce one copy each and the storm cannot start.
  Relays therefore do not chain through each other on the fast path (use the Python path,
  ``fast_path: off``, for chained sites).
"""

import json
import logging
import shutil
import subprocess
from dataclasses import dataclass
from typing import Final

from ipxbridge.policy.relay import Egress

logger = logging.getLogger(__name__)

TABLE: Final = "ipxbridge"
DSCP_MARK: Final = 0x2E  # EF; any value works as long as all bridges agree
INSPECT_PPS: Final = 5000  # originals per second and ingress handed to the inspector


def _nft() -> str:
    return shutil.which("nft") or "/usr/sbin/nft"


@dataclass(frozen=True, slots=True)
class FanoutRule:
    """One copy the kernel makes: from ingress to (egress, target address)."""

    ingress: str
    egress: str
    target: str


def ruleset(
    egresses: tuple[Egress, ...], ports: tuple[int, ...], mark: int = DSCP_MARK
) -> tuple[str, list[FanoutRule]]:
    """The nft script for a plan, and the copies it makes (pure; unit-tested)."""
    port_set = "{ " + ", ".join(str(p) for p in sorted(set(ports))) + " }"
    lines = [
        f"add table ip {TABLE}",
        f"delete table ip {TABLE}",
        f"table ip {TABLE} {{",
        "  chain fanout {",
        "    type filter hook prerouting priority -300; policy accept;",
        # Marked copies (the kernel loops ours back; other bridges' arrive too) are never
        # fanned out again and the Python side would only count and drop them: drop them
        # here, counted, and spare the socket (it doubled the receive work at saturation).
        f'    udp dport {port_set} ip dscp {mark:#x} counter drop comment "marked"',
    ]
    chains: list[str] = []
    rules: list[FanoutRule] = []
    for n, ing in enumerate(egresses):
        copies: list[tuple[Egress, str]] = []
        for out in egresses:
            if out.index == ing.index:
                continue
            targets = (out.broadcast,) if out.role == "lan" else out.peers
            copies.extend((out, t) for t in targets if t)
        if not copies:
            continue
        what = "meta pkttype broadcast" if ing.role == "lan" else f"ip daddr {ing.address}"
        guard = f"ip dscp != {mark:#x} ip ttl > 1 counter jump in_{n}"
        lines.append(f'    iifname "{ing.name}" {what} udp dport {port_set} {guard}')
        # Later fragments of a big broadcast carry no UDP header to match on; copy them too
        # (the first fragment matched above), so a 3000-byte datagram arrives whole. This
        # avoids defragmenting (conntrack) on the fast path, whose cost lands on the CPU that
        # receives the original.
        lines.append(f'    iifname "{ing.name}" {what} ip frag-off & 0x1fff != 0 {guard}')
        body = [f"  chain in_{n} {{", f"    ip dscp set {mark:#x}"]
        for out, target in copies:
            rules.append(FanoutRule(ing.name, out.name, target))
            body.append(
                f'    ip daddr set {target} counter dup to {target} device "{out.name}" '
                f'comment "{ing.name}>{out.name}"'
            )
        # The original continues to local delivery for inspection, at most INSPECT_PPS per
        # ingress: past that (a flood, or a benchmark) the kernel still copies every packet
        # but the Python side sees a counted sample, so it never slows the fan-out down.
        body += [
            "    ip dscp set 0 ip daddr set 255.255.255.255",
            f'    limit rate over {INSPECT_PPS}/second counter drop comment "uninspected"',
            "  }",
        ]
        chains += body
    lines.append("  }")
    lines += chains
    lines.append("}")
    return "\n".join(lines) + "\n", rules


class KernelFanout:
    """Installs and removes the ruleset; reads per-egress copy counters."""

    def __init__(self, ports: tuple[int, ...]) -> None:
        self.ports = ports
        self.rules: list[FanoutRule] = []
        self.installed = False

    @staticmethod
    def available() -> str | None:
        """None when the fast path can run here, else why not."""
        nft = shutil.which("nft")
        if nft is None:
            return "the nft command is not installed (apt install nftables)"
        res = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [nft, "list", "tables"], capture_output=True, text=True, timeout=10, check=False
        )
        if res.returncode != 0:
            return f"nft cannot change rules here ({res.stderr.strip()}); needs CAP_NET_ADMIN"
        return None

    def install(self, egresses: tuple[Egress, ...]) -> bool:
        """Replace the ruleset atomically; False (and logged) if nft refused it."""
        script, rules = ruleset(egresses, self.ports)
        res = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [_nft(), "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if res.returncode != 0:
            logger.error("nft refused the fan-out rules: %s", res.stderr.strip())
            return False
        self.rules = rules
        self.installed = True
        return True

    def remove(self) -> None:
        """Delete our table (nothing of ours is left in the kernel)."""
        if self.installed:
            self.remove_stale()
            self.installed = False

    @staticmethod
    def remove_stale() -> None:
        """Delete a table a crashed earlier run may have left (it would keep copying)."""
        subprocess.run(  # noqa: S603 - fixed argv, no shell
            [_nft(), "delete", "table", "ip", TABLE], capture_output=True, timeout=10, check=False
        )

    def copies_by_egress(self) -> dict[str, int]:
        """Packets each egress has been sent by the kernel, from the rule counters."""
        if not self.installed:
            return {}
        res = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [_nft(), "-j", "list", "table", "ip", TABLE],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if res.returncode != 0:
            return {}
        out: dict[str, int] = {}
        try:
            items = json.loads(res.stdout)["nftables"]
        except (ValueError, KeyError):
            return {}
        for item in items:
            rule = item.get("rule")
            if not rule or ">" not in rule.get("comment", ""):
                continue
            egress = rule["comment"].split(">", 1)[1]
            for expr in rule.get("expr", []):
                if "counter" in expr:
                    out[egress] = out.get(egress, 0) + int(expr["counter"]["packets"])
        return out
