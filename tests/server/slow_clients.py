"""Clients for the server's time and share bounds: real aiohttp clients on chosen loopback addresses (Linux routes all
of 127/8 to the loopback device, so each address is a different peer to the server), and ones that stop reading as a
paused browser `<audio>` element does: a small socket receive buffer and a small read buffer, so once a few packets
are in flight the server's writes to them block."""

from __future__ import annotations

import socket
from typing import Any

import aiohttp

SMALL_RECEIVE_BUFFER = 4096


def _small_socket(addr_info: Any) -> socket.socket:
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_RECEIVE_BUFFER)
    return sock


def session_from(address: str, *, stalls: bool = False) -> aiohttp.ClientSession:
    """A client session whose connections come from `address` (e.g. 127.0.1.7); `stalls`: it reads little."""
    if stalls:
        connector = aiohttp.TCPConnector(limit=0, local_addr=(address, 0), socket_factory=_small_socket)
        return aiohttp.ClientSession(connector=connector, read_bufsize=1024)
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, local_addr=(address, 0)))
