"""Ports for the servers the tests start.

A port the kernel hands out for ``bind(0)`` comes from its ephemeral range, the same range it draws from for
every outgoing connection; between releasing it and the server binding it, a client connection (Kueue's and the
controller manager's dozens to the API server, the API server's to etcd) can take it, and the server fails with
"address already in use" (CI saw this once in 13 real-cluster tests). Listening ports are therefore drawn below
that range, from a per-process window so two test processes do not draw the same sequence.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from pathlib import Path

_FLOOR = 15000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_CEILING = max(_FLOOR + 1000, _ephemeral_low())
_candidates = list(range(_FLOOR, _CEILING))
random.Random(os.getpid()).shuffle(_candidates)
_next = itertools.cycle(_candidates)


def free_port() -> int:
    """A loopback TCP port nobody listens on, outside the ephemeral range (so no client connection takes it)."""
    for _ in range(len(_candidates)):
        port = next(_next)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port between {_FLOOR} and {_CEILING}")
