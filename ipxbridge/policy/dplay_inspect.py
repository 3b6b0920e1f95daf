"""DirectPlay inspection: classify, count, and feed session announcements to the game list.

Every payload the bridge carries or receives passes through here.

Contract:

* Rule 1. Inspection never changes forwarding and never raises for remote input: malformed
  DirectPlay is counted under ``errors[reason]`` and otherwise ignored.
* Rule 2. DirectPlay 4 is tried before DirectPlay 8 (``directplay.classify``; docs/protocols.md
2.5).
* Rule 3. PACKET / PACKET2_DATA fragments go through the bounded ``Reassembler``; a completed
  message is inspected once more (one level only: a reassembled message is not reassembled).
* Rule 4. Counting labels come from closed sets (``command_label``) so metric series stay
  bounded (docs/architecture.md B1).
* Rule 5. ``play`` followed by 0xFF is DirectPlay's reliable protocol (``directplay`` Rule 7):
  counted as ``Reliable``, not as a command and never as malformed.

Pure: the clock is passed in.
"""

from collections import Counter
from collections.abc import Hashable
from typing import Final

from ipxbridge.policy.reassembly import Reassembler
from ipxbridge.policy.sessions import SessionTable
from ipxbridge.wire.directplay import (
    RELIABLE_NAME,
    DP4Message,
    DP8EnumQuery,
    DP8EnumResponse,
    DP8Frame,
    DPlayError,
    DPlayKind,
    DPlayMessage,
    EnumSessionsReply,
    PacketFragment,
    classify,
    command_name,
    dp4_command_of,
    dp8_frame_name,
    parse_dp4,
    parse_dplay,
)

# DP4 commands worth their own label; everything else is "other" (bounded label set).
DP4_LABELS: Final = frozenset(
    {
        "EnumSessions",
        "EnumSessionsReply",
        "Packet",
        "Packet2Data",
        "Packet2Ack",
        "Ping",
        "PingReply",
        "RequestPlayerId",
        "RequestPlayerReply",
        "CreatePlayer",
        "DeletePlayer",
        "AddForwardRequest",
        "SuperEnumPlayersReply",
        "IAmNameServer",
        "PlayerMessage",
        RELIABLE_NAME,  # 'play' + 0xFF: DirectPlay's reliable protocol
    }
)

DP8_LABELS: Final = frozenset(
    {"Connect", "Connected", "ConnectedSigned", "HardDisconnect", "Sack", "Data", "KeepAlive"}
)
# EnumSessionsReply, PACKET and PACKET2_DATA ([MC-DPL4CS] 2.2; docs/protocols.md 1.3)
DECODED_DP4: Final = frozenset({0x01, 0x15, 0x30})
TRANSPORT_LABEL: Final = {"ipx": "ipx", "udp": "dp4-udp", "tcp": "dp4-tcp"}


def command_label(msg: DPlayMessage) -> tuple[int, str]:
    """(DirectPlay version, bounded command label) of a decoded message."""
    if isinstance(msg, DP4Message):
        name = msg.command_name
        return 4, name if name in DP4_LABELS else "other"
    if isinstance(msg, DP8EnumQuery):
        return 8, "EnumQuery"
    if isinstance(msg, DP8EnumResponse):
        return 8, "EnumResponse"
    name = dp8_frame_name(msg)
    return 8, name if name in DP8_LABELS else "other"


class Inspector:
    """Counts DirectPlay traffic and maintains the session table."""

    def __init__(self, sessions: SessionTable, reassembler: Reassembler) -> None:
        self.sessions = sessions
        self.reassembler = reassembler
        self.messages: Counter[tuple[int, str]] = Counter()
        self.errors: Counter[str] = Counter()

    def inspect(
        self,
        payload: bytes | memoryview,
        *,
        transport: str,
        host: str,
        source: Hashable,
        now: float,
        dp8_context: bool = False,
        kind: DPlayKind | None = None,
    ) -> DPlayMessage | None:
        """Inspect one payload; returns the decoded message, or None if not DirectPlay.

        Args:
            payload: an IPX data field, a UDP payload, or one framed TCP message.
            transport: ``ipx``, ``udp`` or ``tcp``.
            host: how to show the sender in the game list (``ip:port`` or IPX address).
            source: reassembly key of the sender.
            now: monotonic time.
            dp8_context: the payload came from a DirectPlay 8 port (6073, 2302-2400), so
                DirectPlay 8 connection frames are recognised too.
            kind: ``classify(payload, dp8_context=dp8_context)`` if the caller has it
                already (the relay's decision does), so it is not worked out twice.
        """
        if kind is None:
            kind = classify(payload, dp8_context=dp8_context)
        if kind is DPlayKind.NONE:
            return None
        if kind is DPlayKind.DP4_PLAYER:
            self.messages[(4, "PlayerMessage")] += 1
            return None
        if kind is DPlayKind.DP8_DFRAME:
            self.messages[(8, "Data")] += 1
            return None
        # Only what feeds the game list is decoded in full; everything else is counted by
        # its command id (a full decode costs ~20 us, this ~1 us, on every relayed packet).
        if kind is DPlayKind.DP4 or kind is DPlayKind.DP4_BARE:
            command = dp4_command_of(payload, bare=kind is DPlayKind.DP4_BARE)
            if command is None:
                self.messages[(4, RELIABLE_NAME)] += 1
                return None
            if command not in DECODED_DP4:
                name = command_name(command)
                self.messages[(4, name if name in DP4_LABELS else "other")] += 1
                return None
        elif kind is DPlayKind.DP8_ENUM_QUERY:
            self.messages[(8, "EnumQuery")] += 1
            return None
        try:
            msg = parse_dplay(payload, dp8_context=dp8_context)
        except DPlayError as exc:
            self.errors[exc.reason] += 1
            return None
        self._absorb(msg, transport, host, source, now, depth=0)
        return msg

    def _absorb(
        self,
        msg: DPlayMessage,
        transport: str,
        host: str,
        source: Hashable,
        now: float,
        *,
        depth: int,
    ) -> None:
        self.messages[command_label(msg)] += 1
        if isinstance(msg, DP8EnumResponse):
            self.sessions.observe_dp8(msg, host, now)
            return
        if isinstance(msg, DP8EnumQuery | DP8Frame):
            return
        parsed = msg.parsed
        if isinstance(parsed, EnumSessionsReply):
            self.sessions.observe_dp4(parsed, host, TRANSPORT_LABEL.get(transport, transport), now)
        elif isinstance(parsed, PacketFragment) and depth == 0:
            result = self.reassembler.add(source, parsed, now)
            if result.refused is not None:
                self.errors[result.refused] += 1
            elif result.message is not None:
                try:
                    inner = parse_dp4(result.message, bare=True)
                except DPlayError as exc:
                    self.errors[exc.reason] += 1
                    return
                self._absorb(inner, transport, host, source, now, depth=1)

    def tick(self, now: float) -> None:
        """Expire sessions and stale partial messages."""
        self.sessions.expire(now)
        self.reassembler.expire(now)
