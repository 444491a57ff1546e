"""RepBench: how good and how robust is a pretrained image backbone (SynBench, DivergenceRadius, Task Priors).

One source tree, two import names:

* installed (``pip install repbench`` or a wheel): the package is ``repbench`` (configs ship inside it as
  ``repbench/configs``; console scripts ``repbench-train``, ``repbench-eval``, ...). Nothing named ``src``,
  ``callbacks`` or ``configs`` is installed, so it sits beside a lightning-hydra-template project's own ``src``.
* in this repository: the same files are the package ``src`` (``python -m src.train``, as the users asked).
  Importing it under that name registers ``repbench`` as an alias of it, so Hydra targets in ``configs/``
  (``repbench.models.RobustLinearProbe``) resolve to the very same module objects (no second copy of any module).

Code inside the package uses relative imports only, so it does not care which name it was imported under.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

__all__ = ["PACKAGE", "DISTRIBUTION_NAME", "canonical_module_name", "running_module_name"]

__version__ = "0.1.0"

DISTRIBUTION_NAME = "repbench"  # the installed import name, and the one configs and checkpoints record
PACKAGE = __name__  # the name this copy was imported under: "repbench" (installed) or "src" (repository)


def canonical_module_name(name: str) -> str:
    """``src.models.x`` -> ``repbench.models.x`` (the name recorded in checkpoints and configs)."""
    if name == PACKAGE or name.startswith(PACKAGE + "."):
        return DISTRIBUTION_NAME + name[len(PACKAGE) :]
    return name


def running_module_name(name: str) -> str:
    """``repbench.models.x`` -> the name of that module in this process (``src.models.x`` in the repository)."""
    if name == DISTRIBUTION_NAME or name.startswith(DISTRIBUTION_NAME + "."):
        return PACKAGE + name[len(DISTRIBUTION_NAME) :]
    return name


class _PackageAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import <alias>.X`` returns the module ``<real>.X`` itself (same object, no second copy)."""

    def __init__(self, alias: str, real: str) -> None:
        self.alias, self.real = alias, real
        self._specs: dict[str, Any] = {}

    def _real_name(self, name: str) -> str:
        return self.real + name[len(self.alias) :]

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.alias and not fullname.startswith(self.alias + "."):
            return None
        real = self._real_name(fullname)
        if real not in sys.modules and importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        module = importlib.import_module(self._real_name(spec.name))
        self._specs[spec.name] = module.__spec__  # the import system overwrites __spec__; exec_module restores it
        return module

    def exec_module(self, module: Any) -> None:
        module.__spec__ = self._specs.pop(module.__spec__.name, module.__spec__)


def _same_package(module: Any) -> bool:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.dirname(os.path.abspath(getattr(module, "__file__", "") or "")) == here


def _install_alias(alias: str, real: str) -> None:
    if not any(isinstance(f, _PackageAlias) and f.alias == alias for f in sys.meta_path):
        sys.meta_path.insert(0, _PackageAlias(alias, real))  # before an editable install's finder


# In a repository checkout the same files answer to both names, and whichever name is imported first is the real
# package; the other is an alias of it (an editable install can import them as `repbench` before `src`). Only this
# very directory is aliased: a researcher's own `src` package elsewhere is never touched.
_OTHER = {"src": DISTRIBUTION_NAME, DISTRIBUTION_NAME: "src"}.get(__name__)
if _OTHER is not None and _OTHER in sys.modules and _same_package(sys.modules[_OTHER]):
    _install_alias(__name__, _OTHER)
    sys.modules[__name__] = sys.modules[_OTHER]  # the import statement returns the already-loaded package
elif __name__ == "src":
    _install_alias(DISTRIBUTION_NAME, __name__)
    sys.modules.setdefault(DISTRIBUTION_NAME, sys.modules[__name__])
