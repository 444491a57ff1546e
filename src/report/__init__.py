"""The backbone audit report (``python -m src.report``): every method's scores, the SynBench baselines and the
downstream probe accuracies of several backbones in one ranking, with the rank agreement of each score."""

from ..stats.rank_agreement import Agreement, agreement, kendall_tau_b, pearson, permutation_p_value

__all__ = ["Agreement", "agreement", "kendall_tau_b", "pearson", "permutation_p_value"]
