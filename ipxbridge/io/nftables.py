"""The kernel fast path: nftables ``dup`` rules that ipxbridge installs, owns and reads.

Plain fan-out of a broadcast is a copy with a new destination; the kernel does that at line
rate (the "iptables TEE" trick, measured at 1.6x the naive Python relay here and ~33 us of
added latency). ipxbridge keeps everything else in Python: it still receives each original
for DirectPlay inspection, counts it, runs reply handling in rewrite mode (where the fast
path is not used), and reads the rules' counters for metrics.

Ruleset (table ``ip ipxbridge``, replaced atomically with ``nft -f`` on every plan change, so
a re-created interface gets rules for its new index; deleted on exit). The kernel runs these
rules on the core that received the packet, which over veth and for a local sender is the
sender's own: every rule a broadcast walks slows the whole segment's sender. So the layout is
ordered for the common packet, a well-formed broadcast that is not DirectPlay, from an on-link
source, and uses verdict maps where a chain of single tests would do the same: it walks 10
rules with one copy (``COMMON_WALK``; one more per further copy, one more below the
inspection limit), where the layout before the maps walked 16.

* chain ``fanout`` (prerouting, priority -300 = before conntrack), in this order:

  1. ``ip dscp <mark> udp dport <ports>``: copies carry the DSCP mark. A marked datagram is
     never fanned out again (``marked``: the kernel loops every lan copy back to local input,
     and another bridge's copies arrive on a shared segment), except one that arrives on a
     p2p interface: that is another site's bridge's copy, and it goes once more, to the
     LANs only (policy/relay.py rule 5), through chain ``marked``'s ``iifname . ip daddr``
     map to ``check_<n>m``. The DSCP test comes first, so every other packet fails this rule
     on one byte.
  2. ``meta pkttype broadcast udp dport <ports> iifname vmap { <lan ingress> : goto check_<n> }``.
  3. ``udp dport <ports> iifname . ip daddr . udp dport vmap { ... : goto check_<n> }``: on a
     p2p interface broadcasts are datagrams to 255.255.255.255 or the subnet's broadcast (a
     tun device has no link layer, so no pkttype broadcast), and datagrams to the bridge's own
     tunnel address stand in for them.
  4. ``ip frag-off & 0x1fff != 0 goto fragments``: later fragments carry no UDP header; chain
     ``fragments`` sends those of the same ingresses to ``frag_<n>`` (unmarked) or
     ``frag_<n>m`` (marked, on a p2p ingress) for sources and TTL, so a 3000-byte broadcast
     arrives whole without defragmenting (conntrack) on the way.

* chain ``check_<n>``: the sources (policy/relay.py rules 2 and 4, in its order) are one lookup,
  ``ip saddr vmap``, in an interval map: the box's own addresses ``goto drop_own``, invalid
  ones (0/8, loopback, 224/3, every directed broadcast of the plan) ``goto drop_invalid``, and
  on a lan ingress the rest of its on-link prefixes ``goto form_<n>``; a miss there is
  ``source_off_link``. (A p2p ingress has no off-link test: a miss goes on in the chain.)
* chain ``form_<n>``: ``udp sport 0`` (``source_port_zero``); ``ip length . udp length !=
  @wellformed`` (``udp_malformed``; the lookup comes first in the rule, so a well-formed
  datagram skips the tests that spare first fragments and jumbos); DirectPlay (``play`` at
  payload byte 20, ``00 02`` at byte 0) ``return``s to the Python path; ``ip ttl > 1 goto
  in_<n>``; anything else (TTL <= 1) goes on to the Python path, which counts it.
* chain ``in_<n>``: per copy ``ip daddr set T ... dup to T device E`` (the first also sets the
  mark); then ``limit rate over INSPECT_PPS/second drop`` (``uninspected``) and only after it
  the original's restore to 255.255.255.255 and DSCP 0, so an original the limit drops is not
  rewritten for nothing; what passes continues to local delivery (the Python side inspects it).
  ``check_<n>m`` and ``in_<n>m`` are the same for marked arrivals on a p2p ingress, with the
  copies to LANs only; they keep the mark, and so does the original (the Python side knows
  it by it, and books it the same way).
* chains ``drop_own`` and ``drop_invalid``: one counted drop each, shared by every ingress.
* ``dup`` decrements the copy's TTL in prerouting (nf_dup_ipv4), as the Python path's copies
  leave with TTL - 1.
* Loop bound. A copy is made from an original (unmarked) or from a copy that crossed a p2p
  link (marked, to LANs only); a marked datagram on a LAN is never copied, by this bridge
  or any other. So a broadcast crosses at most two bridges, one on each side of a p2p link:
  two bridges on parallel paths produce one copy each and the storm cannot start, two sites
  with a bridge each find each other's games, and a triangle of sites gets one copy per
  bridge at each LAN. A hub that should pass one spoke's copies on to another spoke does not
  (p2p to p2p is never copied twice): give every site's bridge every other site as a peer.

Every drop is a ``counter drop`` rule commented with its reason (``marked``, ``uninspected``,
``own_packet``, ``source_invalid``, ``source_off_link``, ``source_port_zero``,
``udp_malformed``), and every copy a ``counter dup`` rule commented ``ingress>egress``:
``KernelFanout`` reads them by comment, whichever chain holds them.

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
import functools
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

from ipxbridge.policy.relay import DSCP_MARK, INVALID_SOURCES, LIMITED_BROADCAST, Egress
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
    """The nft script for a plan, and the copies it makes (pure; unit-tested).

    The layout (module docstring) is ordered for the common packet: a well-formed broadcast
    that is not DirectPlay, from an on-link source. It walks ``COMMON_WALK`` rules plus one
    per further copy; every other outcome costs the common packet nothing but a failed cheap
    match or a lookup miss.
    """
    ordered_ports = sorted(set(ports))
    dport = (
        str(ordered_ports[0])
        if len(ordered_ports) == 1
        else "{ " + ", ".join(map(str, ordered_ports)) + " }"
    )
    own = _addresses(a for e in egresses for a in (e.addresses or (e.address,)))
    # policy/relay.py rule 4: never a sender; plus every directed broadcast of the plan
    invalid = _addresses(
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
    chains: list[str] = []
    rules: list[FanoutRule] = []
    lan: list[str] = []  # vmap elements: ingress name -> its check chain
    p2p: list[str] = []
    frag_lan: list[str] = []
    frag_p2p: list[str] = []
    marked_p2p: list[str] = []  # marked copies from a p2p ingress: on to the LANs
    frag_marked: list[str] = []
    for n, ing in enumerate(egresses):
        copies: list[tuple[Egress, str]] = []
        for out in egresses:
            if out.index == ing.index:
                continue
            targets = (out.broadcast,) if out.role == "lan" else out.peers
            copies.extend((out, t) for t in targets if t)
        if not copies:
            continue
        check = functools.partial(
            _check_chains, own=own, invalid=invalid, longest=longest if pairs else 0
        )
        if ing.role == "lan":  # broadcasts (``meta pkttype broadcast``)
            lan.append(f'"{ing.name}" : goto check_{n}')
            frag_lan.append(f'"{ing.name}" : goto frag_{n}')
            chains += check(str(n), on_link=ing.networks)
        else:
            # On a tun interface a broadcast is not pkttype broadcast (there is no link
            # layer): it is a datagram to 255.255.255.255 or to the subnet's broadcast, as
            # OpenVPN and tinc deliver a peer's; the remote side's stand-in for one is a
            # datagram to our tunnel address. The same ones the Python path takes as
            # broadcasts (policy/relay.py), so what it books as copied the kernel copied.
            arrivals = dict.fromkeys(
                (
                    ing.address,
                    LIMITED_BROADCAST,
                    *(
                        str(net.broadcast_address)
                        for net in map(ipaddress.IPv4Network, ing.networks)
                        if net.prefixlen < 31
                    ),
                )
            )
            p2p += [
                f'"{ing.name}" . {a} . {p} : goto check_{n}'
                for a in arrivals
                for p in ordered_ports
            ]
            frag_p2p += [f'"{ing.name}" . {a} : goto frag_{n}' for a in arrivals]
            chains += check(str(n), on_link=None)
            # Another site's bridge's copies (marked) go on once more, to the LANs only
            # (policy/relay.py rule 5): the far site's players are on a LAN here.
            lan_copies = [(out, t) for out, t in copies if out.role == "lan"]
            if lan_copies:
                marked_p2p += [f'"{ing.name}" . {a} : goto check_{n}m' for a in arrivals]
                frag_marked += [f'"{ing.name}" . {a} : goto frag_{n}m' for a in arrivals]
                chains += check(f"{n}m", on_link=None)
                # (the same copies as in_<n>'s to the LANs: ``rules`` lists them once)
                chains += _copy_chain(f"{n}m", ing, lan_copies, [], mark=None)
        chains += _copy_chain(str(n), ing, copies, rules, mark=mark)
    marked_drop = 'counter drop comment "marked"'
    if marked_p2p:
        # Marked copies on a p2p ingress are another site's bridge's: checked like any
        # arrival, copied to the LANs; every other marked datagram is dropped, counted.
        fanout = [f"    ip dscp {mark:#x} udp dport {dport} goto marked"]
        chains = [
            "  chain marked {",
            f"    iifname . ip daddr vmap {_vmap(marked_p2p)}",
            f"    {marked_drop}",
            "  }",
            *chains,
        ]
    else:
        # Marked copies (the kernel loops ours back, one per lan copy; other bridges' arrive
        # too) are never fanned out again and the Python side would only count and drop
        # them: drop them here, counted, and spare the socket (it doubled the receive work
        # at saturation). The DSCP test first: every other packet fails it at once.
        fanout = [f"    ip dscp {mark:#x} udp dport {dport} {marked_drop}"]
    if lan:
        fanout.append(f"    meta pkttype broadcast udp dport {dport} iifname vmap {_vmap(lan)}")
    if p2p:
        fanout.append(f"    udp dport {dport} iifname . ip daddr . udp dport vmap {_vmap(p2p)}")
    if frag_lan or frag_p2p:
        # Later fragments of a big broadcast carry no UDP header to match on; copy them too
        # (the first fragment matched above), so a 3000-byte datagram arrives whole. This
        # avoids defragmenting (conntrack) on the fast path, whose cost lands on the CPU that
        # receives the original.
        fanout.append("    ip frag-off & 0x1fff != 0 goto fragments")
        frag = ["  chain fragments {"]
        if frag_lan:
            frag.append(
                f"    ip dscp != {mark:#x} meta pkttype broadcast iifname vmap {_vmap(frag_lan)}"
            )
        if frag_p2p:
            frag.append(f"    ip dscp != {mark:#x} iifname . ip daddr vmap {_vmap(frag_p2p)}")
        if frag_marked:
            frag.append(f"    ip dscp {mark:#x} iifname . ip daddr vmap {_vmap(frag_marked)}")
        chains = [*frag, "  }", *chains]
    drops = [
        f'  chain drop_{name} {{\n    counter drop comment "{reason}"\n  }}'
        for name, reason in (("own", "own_packet"), ("invalid", "source_invalid"))
    ]
    lines = [
        f"add table ip {TABLE}",
        f"delete table ip {TABLE}",
        f"table ip {TABLE} {{",
        *(
            [
                "  set wellformed {",
                "    typeof ip length . udp length",
                f"    elements = {{ {pairs} }}",
                "  }",
            ]
            if pairs
            else []
        ),
        "  chain fanout {",
        "    type filter hook prerouting priority -300; policy accept;",
        *fanout,
        "  }",
        *chains,
        *(drops if rules else []),
        "}",
    ]
    return "\n".join(lines) + "\n", rules


# Rules the common packet walks (a well-formed, non-DirectPlay broadcast from an on-link
# source, one copy, past the inspection limit): fanout 2 (the marked test fails, the ingress
# vmap), check 1 (the source vmap), form 5 (port 0, lengths, DP4, DP8, TTL), in 2 (the copy,
# the limit). Before the vmaps: 16.
COMMON_WALK: Final = 10


def _copy_chain(
    name: str,
    ing: Egress,
    copies: list[tuple[Egress, str]],
    rules: list[FanoutRule],
    *,
    mark: int | None,
) -> list[str]:
    """Chain ``in_<name>``: the copies, then the original on to the inspector (sampled).

    ``mark``: the DSCP the copies get (set with the first copy: one rule fewer to walk), or
    None for a copy of a copy, which keeps the mark it came with, and so does its original.
    """
    chain = [f"  chain in_{name} {{"]
    for i, (out, target) in enumerate(copies):
        rules.append(FanoutRule(ing.name, out.name, target))
        mark_it = f"ip dscp set {mark:#x} " if mark is not None and i == 0 else ""
        chain.append(
            f"    {mark_it}ip daddr set {target} counter dup to {target} "
            f'device "{out.name}" comment "{ing.name}>{out.name}"'
        )
    # The original continues to local delivery for inspection, at most INSPECT_PPS per
    # ingress: past that (a flood, or a benchmark) the kernel still copies every packet but
    # the Python side sees a counted sample, so it never slows the fan-out down. The limit
    # comes first: an original it drops needs no restoring.
    restore = (
        "ip dscp set 0 ip daddr set 255.255.255.255"
        if mark is not None
        else ("ip daddr set 255.255.255.255")
    )
    return [
        *chain,
        f'    limit rate over {INSPECT_PPS}/second counter drop comment "uninspected"',
        f"    {restore}",
        "  }",
    ]


def _check_chains(
    name: str,
    *,
    own: list[tuple[int, int]],
    invalid: list[tuple[int, int]],
    on_link: tuple[str, ...] | None,
    longest: int,
) -> list[str]:
    """Chains ``check_<name>`` (sources), ``form_<name>`` (the datagram), ``frag_<name>``.

    Both end in ``goto in_<name>`` (``_copy_chain``).

    Sources (policy/relay.py rules 2 and 4, in its order: own, invalid, off-link) are one
    lookup of ``ip saddr`` in an interval verdict map: own addresses go to ``drop_own``,
    invalid ones to ``drop_invalid`` and, on a lan ingress, the rest of its on-link prefixes
    on to ``form_<n>``; a miss there is off-link. Each drop counted under the reason the
    Python path gives.
    """
    classes: list[tuple[str, list[tuple[int, int]]]] = [
        ("goto drop_own", own),
        ("goto drop_invalid", invalid),
    ]
    if on_link is not None:
        classes.append((f"goto form_{name}", _addresses(on_link)))
    sources = f"ip saddr vmap {_vmap(_partition(classes))}"
    form = [
        '    udp sport 0 counter drop comment "source_port_zero"',
    ]
    if longest:
        # The lookup first: the common datagram is in the set and skips the rest of the
        # rule. A first fragment (MF set) and a datagram past the set's lengths go on.
        form.append(
            "    ip length . udp length != @wellformed ip frag-off & 0x2000 == 0"
            f' ip length <= {longest} counter drop comment "udp_malformed"'
        )
    form += [
        # DirectPlay is judged and copied in Python (rule 5: kernel_hands_over): 'play'
        # at payload byte 20 (a DP4 SP header), 00 02 at byte 0 (a DP8 EnumQuery).
        f"    @th,{(UDP_HEADER + SIGNATURE_OFFSET) * 8},32"
        f" {int.from_bytes(SIGNATURE, 'big'):#x} return",
        f"    @th,{UDP_HEADER * 8},16 {int.from_bytes(DP8_QUERY_LEAD, 'big'):#x} return",
        f"    ip ttl > 1 goto in_{name}",
    ]
    if on_link is not None:
        check = [
            f"  chain check_{name} {{",
            f"    {sources}",
            '    counter drop comment "source_off_link"',
            "  }",
            f"  chain form_{name} {{",
            *form,
            "  }",
        ]
    else:  # p2p: no off-link test; a lookup miss goes on to the datagram's form
        check = [f"  chain check_{name} {{", f"    {sources}", *form, "  }"]
    # A later fragment (rare): own and invalid sources by a map, off-link by a test, then
    # TTL > 1 to the copies; no UDP header to check.
    frag_sources = [f"    ip saddr vmap {_vmap(_partition(classes[:2]))}"]
    if on_link is not None:
        nets = f"ip saddr != {_nft_set(on_link)} " if on_link else ""
        frag_sources.append(f'    {nets}counter drop comment "source_off_link"')
    frag = [f"  chain frag_{name} {{", *frag_sources, f"    ip ttl > 1 goto in_{name}", "  }"]
    return check + frag


def _addresses(items: Iterable[str]) -> list[tuple[int, int]]:
    """Addresses and prefixes as merged, ordered ranges of integers (first, last)."""
    return _merge(
        (int(net.network_address), int(net.broadcast_address))
        for net in (ipaddress.IPv4Network(a, strict=False) for a in items)
    )


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Ranges (first, last) ordered, with overlapping and adjacent ones joined."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _partition(classes: list[tuple[str, list[tuple[int, int]]]]) -> list[str]:
    """Interval map elements ``range : verdict``, in address order.

    A range that falls in several classes goes to the first: the maps cannot hold
    overlapping intervals.
    """
    taken: list[tuple[int, int]] = []
    out: list[tuple[int, int, str]] = []
    for verdict, ranges in classes:
        for lo, hi in ranges:
            for part in _subtract((lo, hi), taken):
                out.append((*part, verdict))
        taken = _merge((lo, hi) for lo, hi, _ in out)
    return [f"{_span(lo, hi)} : {verdict}" for lo, hi, verdict in sorted(out)]


def _subtract(span: tuple[int, int], taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``span`` outside the ordered, disjoint ranges ``taken``."""
    lo, hi = span
    parts: list[tuple[int, int]] = []
    for t_lo, t_hi in taken:
        if t_hi < lo or t_lo > hi:
            continue
        if t_lo > lo:
            parts.append((lo, t_lo - 1))
        lo = t_hi + 1
        if lo > hi:
            return parts
    return [*parts, (lo, hi)]


def _span(lo: int, hi: int) -> str:
    """One range in nft syntax: an address, a prefix when it is one, else ``first-last``."""
    first, last = ipaddress.IPv4Address(lo), ipaddress.IPv4Address(hi)
    if lo == hi:
        return str(first)
    nets = list(ipaddress.summarize_address_range(first, last))
    return str(nets[0]) if len(nets) == 1 else f"{first}-{last}"


def _vmap(elements: list[str]) -> str:
    return "{ " + ", ".join(elements) + " }"


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
