"""A small evaluator of the nft scripts ``io/nftables.ruleset`` renders (tests only).

It knows exactly the expressions the renderer writes, follows ``goto``/``return`` and verdict
maps as nftables does, and reports what became of one packet and how many rules it walked:
the fast path's cost is paid on the sender's core per rule, so the tests hold the count.
"""

import ipaddress
import re
from dataclasses import dataclass, field

ANY_IP = "255.255.255.255"
Sets = dict[str, set[tuple[int, ...]]]  # named sets: name -> elements


@dataclass
class Packet:
    iif: str
    saddr: str
    daddr: str = ANY_IP
    pkttype: str = "broadcast"
    dscp: int = 0
    ttl: int = 64
    sport: int | None = 2300  # None: no UDP header to read (as in a later fragment)
    dport: int | None = 47624
    payload: bytes = bytes(32)
    frag_offset: int = 0
    more_fragments: bool = False
    ip_length: int | None = None  # None: 28 + the payload
    udp_length: int | None = None  # None: 8 + the payload
    under_limit: bool = False  # False: past the inspection limit (saturation)

    def field(self, name: str) -> int | str | None:
        if self.frag_offset and name.startswith("udp"):
            return None  # nft reads no transport header in a later fragment
        ip_len = self.ip_length if self.ip_length is not None else 28 + len(self.payload)
        udp_len = self.udp_length if self.udp_length is not None else 8 + len(self.payload)
        fields: dict[str, int | str | None] = {
            "iifname": self.iif,
            "ip saddr": self.saddr,
            "ip daddr": self.daddr,
            "meta pkttype": self.pkttype,
            "ip dscp": self.dscp,
            "ip ttl": self.ttl,
            "ip length": ip_len,
            "udp sport": self.sport,
            "udp dport": self.dport,
            "udp length": udp_len if self.sport is not None else None,
        }
        return fields[name]

    def th(self, offset: int, bits: int) -> int | None:
        if self.sport is None or self.frag_offset:
            return None
        header = (
            self.sport.to_bytes(2, "big")
            + (self.dport or 0).to_bytes(2, "big")
            + (8 + len(self.payload)).to_bytes(2, "big")
            + bytes(2)
        )
        data = header + self.payload
        start, end = offset // 8, (offset + bits) // 8
        return int.from_bytes(data[start:end], "big") if end <= len(data) else None


@dataclass
class Outcome:
    verdict: str  # "accept" (on to local delivery), "drop", "copied"
    reason: str = ""  # the drop rule's comment
    walked: int = 0  # rules evaluated
    copies: list[str] = field(default_factory=list)  # comments of the dup rules


def chains(script: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in script.splitlines():
        s = line.strip()
        if m := re.match(r"chain (\S+) \{$", s):
            current = out.setdefault(m.group(1), [])
        elif s == "}" or s.startswith("type filter"):
            continue
        elif current is not None and line.startswith("    "):
            current.append(s)
        if line.startswith("  }"):
            current = None
    return out


def sets(script: str) -> Sets:
    out: Sets = {}
    for m in re.finditer(r"set (\w+) \{\n\s+typeof [^\n]+\n\s+elements = \{ ([^}]*) \}", script):
        out[m.group(1)] = {
            tuple(int(v) for v in e.split(" . ")) for e in m.group(2).split(", ") if e
        }
    return out


def _value(text: str) -> int | str:
    text = text.strip().strip('"')
    if re.fullmatch(r"0x[0-9a-f]+", text):
        return int(text, 16)
    return int(text) if text.isdigit() else text


def _in(value: object, element: str) -> bool:
    """Whether a value matches one element: an address, prefix, range, string or number."""
    if isinstance(value, str) and re.fullmatch(r"[\d.]+", value) and re.match(r"\d+\.", element):
        addr = ipaddress.IPv4Address(value)
        if "-" in element:
            lo, hi = element.split("-")
            return ipaddress.IPv4Address(lo) <= addr <= ipaddress.IPv4Address(hi)
        return addr in ipaddress.IPv4Network(element, strict=False)
    return value == _value(element)


def _elements(body: str) -> list[str]:
    return [e.strip() for e in body.split(",") if e.strip()]


FIELD = (
    r"(iifname|ip saddr|ip daddr|meta pkttype|ip dscp|ip ttl|ip length"
    r"|udp sport|udp dport|udp length)"
)
KEY = FIELD + r"(?: \. " + FIELD + r")*"


def run(script: str, pkt: Packet) -> Outcome:
    table, named = chains(script), sets(script)
    out = Outcome("accept")
    chain, i = "fanout", 0
    stack: list[tuple[str, int]] = []
    while True:
        rules = table[chain]
        if i >= len(rules):
            if not stack:
                return out
            chain, i = stack.pop()
            continue
        rule, i = rules[i], i + 1
        out.walked += 1
        verdict = _eval(rule, pkt, named, out)
        if verdict is None:
            continue
        kind, _, target = verdict.partition(" ")
        if kind == "drop":
            out.verdict = "drop"
            return out
        if kind == "return":
            if not stack:
                return out
            chain, i = stack.pop()
        elif kind == "goto":
            chain, i = target, 0
        elif kind == "jump":
            stack.append((chain, i))
            chain, i = target, 0


def _eval(
    rule: str, pkt: Packet, named: dict[str, set[tuple[int, ...]]], out: Outcome
) -> str | None:
    """The rule's verdict for the packet, None when a match failed or it only acts."""
    rest = rule
    comment = ""
    if m := re.search(r' comment "([^"]*)"$', rest):
        comment, rest = m.group(1), rest[: m.start()]
    while rest:
        rest = rest.strip()
        if m := re.match(KEY + r" (!= )?vmap \{ ([^}]*) \}", rest):
            keys = re.findall(FIELD, m.group(0).split(" vmap")[0])
            values = [pkt.field(k) for k in keys]
            if any(v is None for v in values):
                return None
            for element in _elements(m.group(m.lastindex or 0)):
                key, verdict = element.rsplit(" : ", 1)
                if all(_in(v, e) for v, e in zip(values, key.split(" . "), strict=True)):
                    return verdict
            return None
        if m := re.match(r"ip length \. udp length (!= )?@(\w+)", rest):
            pair = (pkt.field("ip length"), pkt.field("udp length"))
            if pair[1] is None:
                return None
            found = pair in named[m.group(2)]
            if found == bool(m.group(1)):
                return None
        elif m := re.match(r"ip frag-off & (0x[0-9a-f]+) (==|!=) 0", rest):
            bits = (pkt.more_fragments << 13) | pkt.frag_offset
            if ((bits & int(m.group(1), 16)) != 0) != (m.group(2) == "!="):
                return None
        elif m := re.match(r"@th,(\d+),(\d+) (0x[0-9a-f]+)", rest):
            if pkt.th(int(m.group(1)), int(m.group(2))) != int(m.group(3), 16):
                return None
        elif m := re.match(r"(ip dscp set|ip daddr set) \S+", rest):
            pass  # what the copy carries; the tests look at the script for it
        elif m := re.match(r'dup to \S+ device "[^"]+"', rest):
            out.copies.append(comment)
            out.verdict = "copied"
        elif m := re.match(r"limit rate over \S+", rest):
            if pkt.under_limit:
                return None
        elif m := re.match(r"counter", rest):
            pass
        elif m := re.match(FIELD + r" (!= |> |<= )?(\{ [^}]* \}|\S+)", rest):
            value = pkt.field(m.group(1))
            if value is None:
                return None
            op, operand = (m.group(2) or "").strip(), m.group(3)
            if op in (">", "<="):
                number = int(value)
                ok = number > int(operand) if op == ">" else number <= int(operand)
            else:
                members = _elements(operand[1:-1]) if operand.startswith("{") else [operand]
                ok = any(_in(value, e) for e in members) != (op == "!=")
            if not ok:
                return None
        elif m := re.match(r"drop$", rest):
            out.reason = comment
            return "drop"
        elif m := re.match(r"(return|goto \S+|jump \S+)$", rest):
            return m.group(1)
        else:
            raise ValueError(f"unknown expression at {rest!r} in {rule!r}")
        rest = rest[m.end() :]
    return None
