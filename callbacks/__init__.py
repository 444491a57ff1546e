"""Repository shortcut: ``from callbacks import SynBenchCallback`` from the repository root.

The callbacks live in ``src/callbacks/`` (installed: ``repbench.callbacks``); this package only re-exports them, so
there is one implementation whichever way they are imported.
"""

from src.callbacks import *  # noqa: F403
from src.callbacks import __all__  # noqa: F401
