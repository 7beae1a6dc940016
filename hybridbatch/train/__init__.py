"""Training: Parameters (shared weights and their gradients), ParameterDict (named sets,
saving and loading), the optimizers behind `hb.Trainer` and its learning-rate schedules, and
data-parallel training over MPI (`hb.distributed`).
"""
from .lr_schedule import Schedule, StepSchedule, CosineSchedule, WarmUp

__all__ = ["Schedule", "StepSchedule", "CosineSchedule", "WarmUp"]
