"""Offline detection shared by weight and data-set loaders: fail fast instead of retrying a missing network."""

from __future__ import annotations

import os
import socket
from functools import lru_cache

__all__ = ["OFFLINE_VARS", "offline_mode", "offline_reason", "host_reachable"]

OFFLINE_VARS = ("REPBENCH_OFFLINE", "HF_HUB_OFFLINE")
_TRUE = {"1", "true", "yes", "on"}


def offline_mode() -> str | None:
    """The environment variable that declares offline mode (``REPBENCH_OFFLINE``/``HF_HUB_OFFLINE``), or None."""
    for var in OFFLINE_VARS:
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return var
    return None


@lru_cache(maxsize=32)
def _connect(host: str, port: int, timeout: float) -> str | None:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        return f"cannot reach {host}:{port} ({err})"
    return None


def offline_reason(host: str, port: int = 443, timeout: float = 2.0) -> str | None:
    """Why ``host:port`` cannot be used now (offline variable set, or no TCP connection within ``timeout``)."""
    var = offline_mode()
    if var:
        return f"{var}={os.environ[var]} is set"
    return _connect(host, int(port), float(timeout))


def host_reachable(host: str, port: int = 443, timeout: float = 2.0) -> bool:
    return offline_reason(host, port, timeout) is None
