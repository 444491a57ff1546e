"""Statistics shared by several layers: rank agreement between scores (:mod:`.rank_agreement`: Pearson, Spearman,
Kendall's tau-b, bootstrap intervals, permutation p-values) and Pareto fronts with objective limits (:mod:`.pareto`).
A foundation package: it imports only :mod:`src.utils`."""
