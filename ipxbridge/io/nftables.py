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

Lifecycle (docs/reliability.md R18). The table outlives the process: after a SIGKILL or an OOM kill
the kernel keeps copying with no bridge, and a bridge restarted on the Python path (or with
the relay off) would then add a second copy of every broadcast. So every start removes the
table whatever the configuration (``remove_table``), ``ipxbridge cleanup`` does the same for
an operator, and the systemd unit and the container entrypoint run it after the bridge exits.

Counters (docs/reliability.md R13). Every install replaces the table and its counters restart at
0; ``KernelFanout`` folds each read into running totals (and reads once more just before a
replace), so the copies and the ``marked``/``uninspected`` drops it reports only ever grow.
"""

import enum
import ipaddress
import json
import logging
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ipxbridge.policy.relay import DSCP_MARK, INVALID_SOURCES, Egress
from ipxbridge.wire.directplay import DP8_QUERY_LEAD, SIGNATURE, SIGNATURE_OFFSET

logger = logging.getLogger(__name__)

TABLE: Final = "ipxbridge"
INSPECT_PPS: Final = 5000  # originals per second and ingress handed to the inspector
# Comments of the ruleset's drop counters: reasons a datagram on a relay port never reaches
# the bridge's socket (ipxbridge_fastpath_dropped_packets_total, exported at 0 from the
# start). Any other commented rule that drops is reported under its comment as well.
FASTPATH_DROP_REASONS: Final = ("marked", "uninspected")
NFT_TIMEOUT: Final = 10.0
UDP_HEADER: Final = 8  # bytes: nft @th offsets count from the start of the UDP header


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
    own = _nft_set(a for e in egresses for a in (e.addresses or (e.address,)))
    # policy/relay.py rule 4: never a sender; plus every directed broadcast of the plan
    invalid = _nft_set(
        (
            *INVALID_SOURCES,
            *(e.broadcast for e in egresses if e.broadcast),
            *(
                str(net.broadcast_address)
                for e in egresses
                for net in map(ipaddress.IPv4Network, e.networks)
                if net.prefixlen < 31
            ),
        )
    )
    # nft cannot compare two header fields, so "UDP length = IP length - 20" is a lookup of
    # the pair in a set of every valid one, up to the largest ingress MTU (a jumbo at most):
    # a datagram the host's own stack would reject (UDP length past the packet, under 8) is
    # dropped instead of copied. The UDP checksum cannot be checked in nftables at all (only
    # conntrack verifies it, for the whole box); a copy keeps the original's bad checksum and
    # every receiver drops it as this box's own stack does.
    longest = min(max((e.mtu for e in egresses), default=0), 9216)
    pairs = ", ".join(f"{n} . {n - 20}" for n in range(28, longest + 1))
    wellformed = ["  set wellformed {", "    typeof ip length . udp length"]
    wellformed += [f"    elements = {{ {pairs} }}", "  }"]
    lines = [
        f"add table ip {TABLE}",
        f"delete table ip {TABLE}",
        f"table ip {TABLE} {{",
        *(wellformed if pairs else []),
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
        guard = f"ip dscp != {mark:#x} jump check_{n}"
        lines.append(f'    iifname "{ing.name}" {what} udp dport {port_set} {guard}')
        # Later fragments of a big broadcast carry no UDP header to match on; copy them too
        # (the first fragment matched above), so a 3000-byte datagram arrives whole. This
        # avoids defragmenting (conntrack) on the fast path, whose cost lands on the CPU that
        # receives the original.
        lines.append(f'    iifname "{ing.name}" {what} ip frag-off & 0x1fff != 0 {guard}')
        # Sources and form (policy/relay.py rules 4 and 5, in its order); each drop counted
        # under the reason the Python path gives.
        check = [
            f"  chain check_{n} {{",
            f'    ip saddr {own} counter drop comment "own_packet"',
            f'    ip saddr {invalid} counter drop comment "source_invalid"',
        ]
        if ing.role == "lan":
            on_link = f"ip saddr != {_nft_set(ing.networks)} " if ing.networks else ""
            check.append(f'    {on_link}counter drop comment "source_off_link"')
        check += [
            f"    ip frag-off & 0x1fff != 0 ip ttl > 1 counter goto in_{n}",
            "    ip frag-off & 0x1fff != 0 return",
            '    udp sport 0 counter drop comment "source_port_zero"',
        ]
        if pairs:
            check.append(
                f"    ip frag-off & 0x2000 == 0 ip length <= {longest} ip length . udp length"
                ' != @wellformed counter drop comment "udp_malformed"'
            )
        check += [
            # DirectPlay is judged and copied in Python (rule 5: kernel_hands_over): 'play'
            # at payload byte 20 (a DP4 SP header), 00 02 at byte 0 (a DP8 EnumQuery).
            f"    @th,{(UDP_HEADER + SIGNATURE_OFFSET) * 8},32"
            f" {int.from_bytes(SIGNATURE, 'big'):#x} return",
            f"    @th,{UDP_HEADER * 8},16 {int.from_bytes(DP8_QUERY_LEAD, 'big'):#x} return",
            f"    ip ttl > 1 counter goto in_{n}",
            "  }",
        ]
        body = [*check, f"  chain in_{n} {{", f"    ip dscp set {mark:#x}"]
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


def _nft_set(items: Iterable[str]) -> str:
    """An anonymous nft set of addresses or prefixes, in address order, each once."""
    ordered = sorted(set(items), key=lambda a: ipaddress.IPv4Network(a, strict=False))
    return "{ " + ", ".join(ordered) + " }"


def _run_nft(*args: str, script: str | None = None) -> subprocess.CompletedProcess[str]:
    """One nft command (never through a shell); C locale so errors read the same everywhere.

    Raises:
        OSError: nft cannot be started.
        subprocess.TimeoutExpired: nft took longer than ``NFT_TIMEOUT``.
    """
    return subprocess.run(  # noqa: S603 - fixed argv, no shell
        [_nft(), *args],
        input=script,
        capture_output=True,
        text=True,
        timeout=NFT_TIMEOUT,
        check=False,
        env={**os.environ, "LC_ALL": "C"},
    )


class Removal(enum.Enum):
    """What ``remove_table`` found."""

    REMOVED = "removed"  # the table was there and is gone
    ABSENT = "absent"  # nothing of ours in the kernel
    NO_NFT = "no_nft"  # nft is not installed: ipxbridge cannot have made a table
    NOT_PERMITTED = "not_permitted"  # nft may not read the ruleset (no CAP_NET_ADMIN)
    FAILED = "failed"  # nft ran and failed otherwise (the detail says how)


@dataclass(frozen=True, slots=True)
class RemovalResult:
    """The outcome of ``remove_table``, with nft's own words when it failed."""

    outcome: Removal
    detail: str = ""
    rules: int = 0  # rules the removed table held (what was still copying)


def remove_table() -> RemovalResult:
    """Delete ``table ip ipxbridge`` if this network namespace has one (idempotent).

    Never raises: a missing nft, a refusal or a timeout is an outcome.
    """
    if shutil.which("nft") is None and not Path(_nft()).exists():
        return RemovalResult(Removal.NO_NFT, "the nft command is not installed")
    try:
        listed = _run_nft("-j", "list", "table", "ip", TABLE)
        if listed.returncode != 0:
            err = listed.stderr.strip()
            if "No such file or directory" in err:
                return RemovalResult(Removal.ABSENT)
            if "Operation not permitted" in err:
                return RemovalResult(Removal.NOT_PERMITTED, _first_line(err))
            return RemovalResult(Removal.FAILED, _first_line(err))
        rules = sum(1 for item in _items(listed.stdout) if "rule" in item)
        deleted = _run_nft("delete", "table", "ip", TABLE)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return RemovalResult(Removal.FAILED, str(exc))
    if deleted.returncode != 0:
        err = deleted.stderr.strip()
        if "No such file or directory" in err:  # gone meanwhile: nothing of ours is left
            return RemovalResult(Removal.ABSENT)
        return RemovalResult(Removal.FAILED, _first_line(err))
    return RemovalResult(Removal.REMOVED, rules=rules)


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else "no message"


def _items(stdout: str) -> list[dict[str, dict[str, object]]]:
    try:
        items = json.loads(stdout)["nftables"]
    except (ValueError, KeyError, TypeError):
        return []
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


@dataclass(frozen=True, slots=True)
class FastPathCounts:
    """The fast path's counters since the bridge started (monotonic across reinstalls)."""

    copies: dict[str, int] = field(default_factory=dict)  # by egress interface
    dropped: dict[str, int] = field(default_factory=dict)  # by FASTPATH_DROP_REASONS


CounterKey = tuple[str, str, str]  # ("copy" | "drop", chain, comment)


def parse_counters(stdout: str) -> dict[CounterKey, int] | None:
    """Packet counters of the table's commented copy (``dup``) and ``drop`` rules.

    None if the listing cannot be read. Pure (unit-tested).
    """
    try:
        items = json.loads(stdout)["nftables"]
    except (ValueError, KeyError, TypeError):
        return None
    out: dict[CounterKey, int] = {}
    for item in items:
        rule = item.get("rule") if isinstance(item, dict) else None
        if not rule or not rule.get("comment"):
            continue
        exprs = rule.get("expr", [])
        kind = "copy" if any("dup" in e for e in exprs) else "drop"
        if kind == "drop" and not any("drop" in e for e in exprs):
            continue
        packets = sum(int(e["counter"]["packets"]) for e in exprs if "counter" in e)
        key = (kind, str(rule.get("chain", "")), str(rule["comment"]))
        out[key] = out.get(key, 0) + packets
    return out


def table_handle(stdout: str) -> int | None:
    """The handle of the listed table: a new one means the table was re-created."""
    try:
        items = json.loads(stdout)["nftables"]
        return next(int(i["table"]["handle"]) for i in items if "table" in i)
    except (ValueError, KeyError, TypeError, StopIteration):
        return None


class KernelFanout:
    """Installs and removes the ruleset; reads its counters as running totals.

    Used from one thread at a time (the bridge's nft worker, then ``stop``).
    """

    def __init__(self, ports: tuple[int, ...]) -> None:
        self.ports = ports
        self.rules: list[FanoutRule] = []
        self.installed = False
        self._totals: Counter[CounterKey] = Counter()  # since start
        self._last: dict[CounterKey, int] = {}  # raw counters of the installed table
        self._handle: int | None = None  # that table's handle

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
        if self.installed:
            self.read()  # the replace zeroes the counters: fold in what they hold now
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
            return False  # nft -f is atomic: the old table and its counters stay
        self.rules = rules
        self.installed = True
        self._last = {}
        return True

    def remove(self) -> None:
        """Delete our table (nothing of ours is left in the kernel)."""
        if self.installed:
            self.remove_stale()
            self.installed = False

    @staticmethod
    def remove_stale() -> None:
        """Delete a table a crashed earlier run may have left (it would keep copying)."""
        remove_table()

    def fold(self, raw: dict[CounterKey, int], handle: int | None = None) -> None:
        """Add a reading of the installed table's counters to the running totals."""
        if handle != self._handle:  # re-created (by us or anyone): its counters are all new
            self._last = {}
            self._handle = handle
        for key, packets in raw.items():
            last = self._last.get(key, 0)
            # Lower than last time: the rule was replaced (its counter started again at 0),
            # so all of it is new.
            self._totals[key] += packets - last if packets >= last else packets
        self._last = raw

    def counts(self) -> FastPathCounts:
        """The running totals, by egress and by drop reason."""
        copies: dict[str, int] = {}
        dropped = dict.fromkeys(FASTPATH_DROP_REASONS, 0)
        for (kind, _chain, comment), packets in self._totals.items():
            if kind == "drop":
                dropped[comment] = dropped.get(comment, 0) + packets
            else:  # comment "ingress>egress"
                egress = comment.split(">", 1)[-1]
                copies[egress] = copies.get(egress, 0) + packets
        return FastPathCounts(copies, dropped)

    def read(self) -> FastPathCounts:
        """Read the kernel's counters into the totals and return them.

        If nft cannot be read now, the last totals.
        """
        if self.installed:
            try:
                res = _run_nft("-j", "list", "table", "ip", TABLE)
            except (OSError, subprocess.TimeoutExpired):
                res = None
            raw = parse_counters(res.stdout) if res is not None and res.returncode == 0 else None
            if res is not None and raw is not None:
                self.fold(raw, table_handle(res.stdout))
        return self.counts()

    def copies_by_egress(self) -> dict[str, int]:
        """Packets each egress has been sent by the kernel, from the rule counters."""
        return self.read().copies
