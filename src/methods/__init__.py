"""The method contract and its table: :class:`MethodSpec` rows of :data:`METHODS` (SynBench, DivergenceRadius, Task
Priors), each naming its options class, compare function, scores with their directions, torchmetric, callback and
audit parts. The report, model selection, the sweep-objective check and the torchmetrics' flags loop over it."""

from .spec import AuditPart, MethodSpec, PartContext, Score, resolve
from .table import METHODS, column_direction, descriptive_columns, logged_score, method, register_method

__all__ = [
    "METHODS",
    "AuditPart",
    "MethodSpec",
    "PartContext",
    "Score",
    "column_direction",
    "descriptive_columns",
    "logged_score",
    "method",
    "register_method",
    "resolve",
]
