"""Clients for the server's time and share bounds: real aiohttp clients on chosen loopback addresses (Linux routes all
of 127/8 to the loopback device, so each address is a different peer to the server), and ones that stop reading as a
paused browser `<audio>` element does: a small socket receive buffer and a small read buffer, so once a few packets
are in flight the server's writes to them block (and a WebSocket client that reads nothing at all after its
handshake)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
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


async def stalled_websocket(base: str, path: str, address: str, request_id: str,
                            messages: list[dict[str, Any]]) -> socket.socket:
    """A WebSocket client (RFC 6455 over a plain socket with a small receive buffer) that opens `path` from `address`,
    sends `messages` as JSON text frames and then reads nothing at all. Close the returned socket to end it."""
    host, port = base.removeprefix("http://").split(":")
    sock = _small_socket((socket.AF_INET, socket.SOCK_STREAM, 0, "", None))
    sock.bind((address, 0))
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    await loop.sock_sendall(sock, (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                                   f"x-request-id: {request_id}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:  # the 101 answer, a byte at a time: nothing after it is read
        head += await loop.sock_recv(sock, 1)
    assert head.startswith(b"HTTP/1.1 101"), head
    for message in messages:
        await loop.sock_sendall(sock, _text_frame(json.dumps(message)))
    return sock


def _text_frame(text: str) -> bytes:
    """One final, masked text frame (a client must mask)."""
    payload, mask = text.encode(), os.urandom(4)
    size = bytes([0x80 | len(payload)]) if len(payload) < 126 else bytes([0x80 | 126]) + len(payload).to_bytes(2, "big")
    return bytes([0x81]) + size + mask + bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
