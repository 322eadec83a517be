"""CallerNetwork: a network namespace for the caller, joined to this host by a veth pair the drill can cut.

Contract: `with CallerNetwork() as net:` creates namespace `vaf-<hex>` and a veth pair (`vaf<hex>h` on this host,
`vaf<hex>n` inside) on a free /30 of 10.251.0.0/16: `net.host_ip` (this host's end, where LiveKit listens for the
caller) and `net.ns_ip`. `net.popen(argv)` runs a process inside; `net.cut()` / `net.restore()` take this host's
end of the link down and up (packets in flight are dropped, TCP connections stall, nothing is closed). Leaving the
block deletes the pair and the namespace, whatever happened. Needs root and iproute2 (`ip`).
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
from typing import Any


def ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def free_subnet() -> ipaddress.IPv4Network:
    used = ip("-o", "-4", "addr", "show")
    for _ in range(100):
        net = ipaddress.ip_network(f"10.251.{secrets.randbelow(256)}.{4 * secrets.randbelow(64)}/30")
        if not any(str(host) in used for host in net.hosts()):
            return net
    raise RuntimeError("no free /30 in 10.251.0.0/16 for the caller's veth pair")


class CallerNetwork:
    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.name = f"vaf-{tag}"
        self.host_if, self.ns_if = f"vaf{tag}h", f"vaf{tag}n"
        net = free_subnet()
        host, inside = list(net.hosts())
        self.host_ip, self.ns_ip, self.prefix = str(host), str(inside), net.prefixlen
        self._made: list[str] = []

    def __enter__(self) -> CallerNetwork:
        try:
            ip("netns", "add", self.name)
            self._made.append("netns")
            ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            self._made.append("veth")
            ip("link", "set", self.ns_if, "netns", self.name)
            ip("addr", "add", f"{self.host_ip}/{self.prefix}", "dev", self.host_if)
            ip("link", "set", self.host_if, "up")
            inside = ("netns", "exec", self.name, "ip")
            ip(*inside, "addr", "add", f"{self.ns_ip}/{self.prefix}", "dev", self.ns_if)
            ip(*inside, "link", "set", self.ns_if, "up")
            ip(*inside, "link", "set", "lo", "up")
        except Exception:
            self.__exit__()
            raise
        return self

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.name, *argv], **kw)

    def cut(self) -> None:
        ip("link", "set", self.host_if, "down")

    def restore(self) -> None:
        ip("link", "set", self.host_if, "up")

    def __exit__(self, *exc: object) -> None:
        if "veth" in self._made:  # deleting one end deletes the pair
            subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        if "netns" in self._made:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        self._made.clear()
