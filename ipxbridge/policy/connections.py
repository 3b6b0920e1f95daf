"""The browser players' address space: a WebSocket connection as the switch's client address.

A WebSocket connection (a browser player, io/websocket.py) is a client of the switch like a
DOSBox one, at the address (its IP, ``CONNECTION_PORT_BASE`` + its TCP port): above every UDP
port, so no datagram can ever come from, or be taken for, a connection's address.
"""

from ipxbridge.policy.ports import Address

CONNECTION_PORT_BASE = 1 << 16


def connection_address(ip: str, tcp_port: int) -> Address:
    """The switch's address for a WebSocket connection from ``ip:tcp_port``."""
    return (ip, CONNECTION_PORT_BASE + tcp_port)


def is_connection(addr: Address) -> bool:
    """Whether ``addr`` names a WebSocket connection, not a UDP address."""
    return addr[1] >= CONNECTION_PORT_BASE
