"""Hosts of a test's own: network namespaces on a private /24, for partitions made for real.

Responsibility: ``PrivateNetwork(hosts)`` makes (``up``) a bridge in the root namespace at
``10.A.B.1`` (where the test, its controllers and its PostgreSQL server are reached, the
database also at ``10.A.B.2``) and, per host, a network namespace whose veth is on the bridge at
``10.A.B.(10 + i)``; ``down`` removes all of it. A process runs in host ``i`` through
``prefix(i)`` (``ip netns exec``). The faults, each undone by its pair:

* ``cut(i)`` / ``heal(i)``: the host's link is down (a partition: nothing in or out);
* ``blackhole(i, address)`` / ``unblackhole(i, address)``: the host drops what it sends to one
  address (the database alone, or the controllers and clients alone: an asymmetric cut).

Needs root and ``ip`` (iproute2); ``available()`` says why not where the machine does not allow
it, and the tests skip with that notice. Only addresses of the subnet made here are touched.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import subprocess
import uuid

__all__ = ["PrivateNetwork", "available"]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def available() -> str | None:
    """Why network namespaces cannot be made here (``None``: they can)."""
    if shutil.which("ip") is None:
        return "no ip command (iproute2)"
    probe = f"mrprobe{uuid.uuid4().hex[:6]}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add is not allowed here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _free_subnet() -> str:
    """``10.A.B`` of a /24 no interface of this machine has an address in."""
    used = _ip("-4", "-o", "addr").stdout
    for _ in range(200):
        prefix = f"10.{random.randint(100, 250)}.{random.randint(0, 255)}"
        if f" {prefix}." not in used:
            return prefix
    raise RuntimeError("no free 10.x.y.0/24 subnet")


class PrivateNetwork:
    """A bridge and ``hosts`` namespaces on a private /24 (see the module's docstring)."""

    def __init__(self, hosts: int) -> None:
        self.tag = uuid.uuid4().hex[:5]
        self.subnet = _free_subnet()
        self.bridge = f"mrb{self.tag}"
        #: The root namespace's address on the bridge (the controllers, the test's clients) ...
        self.gateway = f"{self.subnet}.1"
        #: ... and the database's (the same namespace, an address of its own to cut alone).
        self.database = f"{self.subnet}.2"
        self.namespaces = [f"mr{self.tag}h{i}" for i in range(hosts)]
        self.addresses = [f"{self.subnet}.{10 + i}" for i in range(hosts)]
        self._outer = [f"mv{self.tag}o{i}" for i in range(hosts)]

    def up(self) -> PrivateNetwork:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            for address in (self.gateway, self.database):
                _ip("addr", "add", f"{address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, namespace in enumerate(self.namespaces):
                self._host(i, namespace)
        except BaseException:
            self.down()
            raise
        return self

    def _host(self, i: int, namespace: str) -> None:
        outer, inner = self._outer[i], f"mv{self.tag}i{i}"
        _ip("netns", "add", namespace)
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", namespace)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        _ip("-n", namespace, "addr", "add", f"{self.addresses[i]}/24", "dev", inner)
        _ip("-n", namespace, "link", "set", inner, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")

    def down(self) -> None:
        for namespace in self.namespaces:
            _ip("netns", "del", namespace, check=False)
        for outer in self._outer:
            _ip("link", "del", outer, check=False)
        _ip("link", "del", self.bridge, check=False)

    def __enter__(self) -> PrivateNetwork:
        return self.up()

    def __exit__(self, *exc_info: object) -> None:
        self.down()

    def prefix(self, i: int) -> list[str]:
        """The command that runs what follows it in host ``i``."""
        return ["ip", "netns", "exec", self.namespaces[i]]

    # -- faults ----------------------------------------------------------------------------------

    def cut(self, i: int) -> None:
        """Host ``i`` is partitioned: its link is down, nothing goes in or out."""
        _ip("link", "set", self._outer[i], "down")

    def heal(self, i: int) -> None:
        _ip("link", "set", self._outer[i], "up")

    def blackhole(self, i: int, address: str) -> None:
        """Host ``i`` drops everything it sends to ``address`` (so no connection to it
        completes; what it had open stalls)."""
        _ip("-n", self.namespaces[i], "route", "add", "blackhole", f"{address}/32")

    def unblackhole(self, i: int, address: str) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("-n", self.namespaces[i], "route", "del", "blackhole", f"{address}/32")
