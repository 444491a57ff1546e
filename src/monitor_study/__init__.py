"""The monitoring study: do label-free monitors guide pretraining as well as labelled downstream accuracy?

``python -m src.monitor_study`` pretrains a small network over a grid (objectives × learning rates × seeds), logs
every label-free monitor next to held-out linear-probe and k-NN accuracy before training and after every epoch
(:mod:`.runner`), and reports (:mod:`.analysis`, :mod:`.render`): (a) within-run rank agreement of each score with
downstream accuracy, (b) the learning rate each criterion picks and its regret, (c) collapse detection by each alarm
rule, (d) the same criteria as changes from their value at initialisation.
"""

from .analysis import CRITERIA, collapse_detection, regret_table, within_run_agreement

__all__ = ["CRITERIA", "collapse_detection", "regret_table", "within_run_agreement"]
