"""Capture files in, decoded frames out: classic pcap and pcapng (``ipxbridge decode --pcap``).

Contract (h11 style): :func:`read_capture` yields one ``wire.pcap.Frame`` per packet and
raises nothing but ``PcapError``, whose ``reason`` is one of ``wire.pcap.PCAP_REASONS``.
One bad record never fails a whole file: a pcapng block that breaks after the first packet
ends the file with one ``Frame`` whose ``error`` says why (as a truncated classic pcap
record does). Only a file with no readable packet before the damage raises.

This is the only module that imports python-pcapng (untyped, like pyroute2 in
``io/netlink.py``): values leave it as ``int``, ``float`` and ``bytes``, and the link layer
is decoded by the pure ``wire.pcap.decode_link``. Classic pcap (one 24-byte header, 16-byte
record headers) stays with ``wire.pcap.read_pcap``: python-pcapng does not read it.

Why python-pcapng and not dpkt (both evaluated, as installed from PyPI):

* **dpkt 1.9.8** (BSD-3-Clause, released 2022-08, no type hints) reads both formats, but its
  ``pcapng.Reader`` keeps only the *first* Interface Description Block: every packet gets
  that interface's link type and timestamp resolution (an open bug of the dpkt project,
  https://github.com/kbandla/dpkt/issues/681). On a
  ``mergecap`` file with an Ethernet and a raw-IP interface it reported link type 1 for all
  six packets, so the raw-IP ones would decode as garbage. It skips Simple Packet Blocks
  (those packets vanish), and its classic reader returns a cut-off last record as if whole.
* **python-pcapng 2.1.1** (Apache-2.0, released 2022-08, pure Python, no dependencies, no
  type hints) keeps every interface of every section with its link type and ``if_tsresol``;
  reads Enhanced, Simple and obsolete Packet Blocks, both byte orders and several sections.

Neither has had a release since 2022-08; python-pcapng does what item 9 asks. Its rough
edges, measured and handled here:

* On hostile input it raises far outside its own exception tree: ``ValueError``,
  ``struct.error``, ``UnicodeDecodeError`` and ``OSError`` while decoding options, and a
  ``TypeError`` from its own check for repeated options. So each call into it is wrapped
  and every exception becomes a ``PcapError`` reason or an error ``Frame``.
* A block cut exactly at a field boundary ends its scan silently (``StreamEmpty``); we check
  that the last whole block ends where the file does.
* It warns (``DeprecationWarning``) about its own schema for every interface that carries
  ``if_tsresol``: silenced around its calls.
* It does not apply ``if_tsoffset`` or check the section's major version: done here.
"""

import io
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from pcapng import FileScanner, blocks
from pcapng.exceptions import BadMagic, TruncatedFile

from ipxbridge.wire.pcap import Frame, PcapError, PcapReason, decode_link, read_pcap

PCAPNG_MAGIC: Final = b"\x0a\x0d\x0d\x0a"  # Section Header Block type, read in either byte order
PCAPNG_MAJOR_VERSION: Final = 1
_DETAIL_MAX: Final = 120


def read_capture(data: bytes) -> Iterator[Frame]:
    """Yield every packet of a classic pcap or pcapng file, decoded to its transport payload.

    Raises:
        PcapError: the file is neither format, or unreadable before its first packet.
    """
    if data[:4] == PCAPNG_MAGIC:
        return _read_pcapng(data)
    return read_pcap(data)


@dataclass(frozen=True, slots=True)
class _Packet:
    """One packet block, its values taken out of the library's objects."""

    interface: int
    link_type: int | None  # None: no Interface Description Block for this interface id
    timestamp: float | None  # None: Simple Packet Blocks carry no timestamp
    data: bytes


class _UnsupportedVersionError(Exception):
    """A section of a pcapng version this reader does not know."""


def _read_pcapng(data: bytes) -> Iterator[Frame]:
    stream = io.BytesIO(data)
    scanner = iter(FileScanner(stream))
    number = 0
    end = 0  # where the last whole block ended
    while True:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                block = next(scanner, None)
                packet = None if block is None else _packet(block)
        except Exception as exc:  # noqa: BLE001 -- the library's failures are not a closed set
            reason, message = _damage(exc, end, at_eof=stream.tell() >= len(data))
            break
        if block is None:
            if end == len(data):
                return
            reason, message = "truncated", f"truncated pcapng file: block at byte {end} ends early"
            break
        end = stream.tell()
        if packet is None:  # section header, interface description, statistics, ...
            continue
        number += 1
        if packet.link_type is None:
            yield Frame(
                number,
                packet.timestamp,
                error=f"no interface description for interface {packet.interface}",
            )
        else:
            yield decode_link(number, packet.timestamp, packet.link_type, packet.data)
    if number == 0:
        raise PcapError(reason, message)
    yield Frame(number + 1, None, error="truncated record" if reason == "truncated" else message)


def _packet(block: object) -> _Packet | None:
    """The packet in ``block``, or None for a block that holds none."""
    if isinstance(block, blocks.SectionHeader):
        if block.version_major != PCAPNG_MAJOR_VERSION:
            version = f"{block.version_major}.{block.version_minor}"
            raise _UnsupportedVersionError(f"pcapng version {version}")
        return None
    if not isinstance(block, blocks.EnhancedPacket | blocks.SimplePacket | blocks.ObsoletePacket):
        return None
    interface = int(block.interface_id)
    description = block.section.interfaces.get(interface)
    if description is None:
        return _Packet(interface, None, None, bytes(block.packet_data))
    timestamp = None
    if not isinstance(block, blocks.SimplePacket):
        offset = int(description.options.get("if_tsoffset", 0))
        timestamp = float(block.timestamp) + offset
    return _Packet(interface, int(description.link_type), timestamp, bytes(block.packet_data))


def _damage(exc: Exception, start: int, *, at_eof: bool) -> tuple[PcapReason, str]:
    """The reason and one-line message for a block at byte ``start`` that did not decode."""
    if isinstance(exc, _UnsupportedVersionError):
        return "unsupported", f"{exc} is not supported (only {PCAPNG_MAJOR_VERSION}.x)"
    if isinstance(exc, BadMagic):
        return "bad_magic", "not a pcapng file (bad byte-order magic)"
    if isinstance(exc, TruncatedFile) and at_eof:
        return "truncated", f"truncated pcapng file: block at byte {start} ends early"
    detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:_DETAIL_MAX]
    return "malformed", f"malformed pcapng block at byte {start} ({detail})"
