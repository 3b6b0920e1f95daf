"""Kernel receive drops per socket, from /proc/net/udp (io/sockstats.py)."""

import socket
from pathlib import Path

import pytest

from ipxbridge.io import sockstats
from ipxbridge.io.sockstats import parse_drops, socket_drop_count, socket_drops

# /proc/net/udp with runs of spaces squeezed (the parser splits on whitespace anyway).
SAMPLE = """\
sl local_address rem_address st tx_queue rx_queue tr tm->when retrnsmt uid timeout inode ref \
pointer drops
123: 00000000:00D5 00000000:0000 07 00000000:00000000 00:00000000 00000000 0 0 40211 2 0 17
124: 0100007F:D427 00000000:0000 07 00000000:00000900 00:00000000 00000000 0 0 40212 2 0 0
125: truncated line
126: 0100007F:D428 00000000:0000 07 00000000:00000000 00:00000000 00000000 0 0 notanumber 2 0 5
"""


def test_parse_drops_maps_inode_to_drops_and_skips_bad_lines() -> None:
    assert parse_drops(SAMPLE) == {40211: 17, 40212: 0}
    assert parse_drops("") == {}


def test_a_real_overflowing_socket_reports_exactly_what_it_lost() -> None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum
        rx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        assert socket_drops([rx]) == 0
        sent = 500
        for _ in range(sent):
            tx.sendto(b"x" * 1000, rx.getsockname())
        received = 0
        while True:
            try:
                rx.recv(2048)
            except BlockingIOError:
                break
            received += 1
        drops = socket_drops([rx])
        assert drops is not None
        assert drops > 0
        assert received + drops == sent
        assert socket_drops([tx]) == 0  # per socket, not per host
        # the same counter read without /proc, as a socket about to close is read
        assert socket_drop_count(rx) == drops
        assert socket_drop_count(tx) == 0
    finally:
        rx.close()
        tx.close()
    assert socket_drops([rx]) == 0  # a closed socket counts for nothing


def test_unreadable_proc_is_unknown_not_zero(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A container without /proc/net: a fault this machine cannot produce for the test process.
    monkeypatch.setattr(sockstats, "PROC_UDP", tmp_path / "missing")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        assert sockstats.socket_drops([sock]) is None
