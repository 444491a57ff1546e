"""The ``progress=`` argument of every ``compare_backbones`` and of the report, as one line sink."""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["progress_sink"]

log = logging.getLogger("repbench")


def progress_sink(progress: bool | Callable[[str], None]) -> Callable[[str], None] | None:
    """True → the ``repbench`` logger at INFO; a callable → itself (it receives each line); False/None → None (silent).
    Anything else is a TypeError naming ``progress=``."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return log.info
    if callable(progress):
        return progress
    raise TypeError(f"progress must be True, False or a callable receiving lines, got {progress!r}")
