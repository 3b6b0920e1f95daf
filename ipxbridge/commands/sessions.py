"""``ipxbridge sessions``: the game list of a running bridge, or a one-off probe."""

import argparse
import asyncio
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from ipxbridge.commands.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    SubParsers,
    add_command,
    iface_arg,
    report,
)
from ipxbridge.errors import StartupError
from ipxbridge.games import game_table
from ipxbridge.io.interfaces import read_topology_netifaces, select_ipv4
from ipxbridge.io.probe import DirectPlayProber
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.reassembly import Reassembler
from ipxbridge.policy.sessions import SessionTable, players_text, session_json, status_text
from ipxbridge.policy.topology import unmatched

Json = dict[str, Any]

EXAMPLES = (
    ("ipxbridge sessions", "the game list of the bridge running on this box"),
    (
        "ipxbridge sessions --url http://192.168.1.2:9213 --json",
        "the game list of a bridge whose HTTP API listens there (http.listen), as JSON",
    ),
    (
        "ipxbridge sessions --probe --iface eth0 --timeout 5",
        "no bridge needed: ask the games on eth0's LAN directly with DirectPlay probes",
    ),
)


def fetch_sessions(url: str, timeout: float = 5.0) -> list[Json]:
    """``GET {url}/api/sessions`` of a running bridge.

    Raises:
        StartupError: the bridge cannot be reached or answered nonsense.
    """
    target = url.rstrip("/") + "/api/sessions"
    if not target.startswith(("http://", "https://")):
        target = "http://" + target
    try:
        with urllib.request.urlopen(target, timeout=timeout) as resp:  # noqa: S310 - http(s)
            data = json.loads(resp.read())
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StartupError(
            f"cannot reach the bridge at {target}: {reason} "
            "(is `ipxbridge run` running with its HTTP API on?)"
        ) from None
    except ValueError:
        raise StartupError(f"{target} did not answer JSON") from None
    if not isinstance(data, list):
        raise StartupError(f"{target} did not answer a list")
    return data


async def probe_sessions(patterns: list[str], seconds: float, rounds: int = 3) -> list[Json]:
    """Probe the given interfaces directly and return what answered within ``seconds``.

    Raises:
        StartupError: no interface matched (:func:`nothing_to_probe` says why).
    """
    interfaces = select_ipv4(patterns)
    if not interfaces:
        raise StartupError(nothing_to_probe(patterns))
    loop = asyncio.get_running_loop()
    sessions = SessionTable(game_table())
    prober = DirectPlayProber(loop, Inspector(sessions, Reassembler()), lambda: interfaces)
    await prober.start()
    try:
        deadline = loop.time() + seconds
        gap = seconds / max(rounds, 1)
        for _ in range(rounds):
            prober.probe()
            await asyncio.sleep(min(gap, max(0.0, deadline - loop.time())))
        await asyncio.sleep(max(0.0, deadline - loop.time()))
    finally:
        await prober.close()
    now = loop.time()
    wall = time.time()
    return [session_json(s, now, wall) for s in sessions.snapshot(now)]


def nothing_to_probe(patterns: list[str]) -> str:
    """Why ``patterns`` leave no IPv4 address to probe from, pattern by pattern.

    A pattern that matches only loopback says so: loopback is never probed, and "matches
    no interface" would be untrue for ``lo``.
    """
    try:
        missing = unmatched(read_topology_netifaces(), patterns)
    except ValueError as exc:
        return str(exc)
    reasons = [str(u) for u in missing]
    named = {u.pattern for u in missing}
    rest = [p for p in patterns if p not in named]
    if rest:  # they select interfaces, none with an IPv4 address
        reasons.append(f"{', '.join(rest)}: no IPv4 address")
    return f"no IPv4 interface to probe: {'; '.join(reasons)}"


def render_table(sessions: list[Json]) -> str:
    """A fixed-width table for people."""
    if not sessions:
        return "no DirectPlay sessions seen\n"
    rows = [("GAME", "SESSION", "MAP", "PLAYERS", "STATUS", "HOST", "TRANSPORT", "LAST SEEN")]
    for s in sessions:
        rows.append(
            (
                str(s.get("game") or s.get("game_guid")),
                str(s.get("session_name") or ""),
                str(s.get("map") or ""),
                players_text(s.get("players"), s.get("max_players")),
                status_text(s),
                str(s.get("host")),
                str(s.get("transport")),
                str(s.get("last_seen")),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows
    )


def add_parser(sub: SubParsers) -> None:
    """Register ``sessions``."""
    parser = add_command(
        sub, "sessions", run, summary="list DirectPlay game sessions", examples=EXAMPLES
    )
    parser.add_argument("--json", action="store_true", help="JSON list")
    parser.add_argument(
        "--url",
        default="http://127.0.0.1:9213",
        help="HTTP API of the running bridge (default %(default)s)",
    )
    parser.add_argument(
        "--probe", action="store_true", help="probe directly instead of asking a running bridge"
    )
    parser.add_argument(
        "--iface",
        type=iface_arg,
        action="append",
        default=[],
        metavar="IF",
        help="interface (name, glob or CIDR) to probe on, repeatable",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="how long to collect answers when probing (default 3)",
    )


def run(args: argparse.Namespace) -> int:
    """Ask the running bridge (or probe), then print a table or JSON."""
    try:
        if args.probe:
            if not args.iface:
                report(["sessions --probe needs at least one --iface"])
                return EXIT_USAGE
            items = asyncio.run(probe_sessions(args.iface, args.timeout))
        else:
            items = fetch_sessions(args.url)
    except StartupError as exc:
        report([str(exc)])
        return EXIT_USAGE if args.probe else EXIT_FAILURE
    if args.json:
        print(json.dumps(items, indent=1))
    else:
        sys.stdout.write(render_table(items))
    return EXIT_OK
