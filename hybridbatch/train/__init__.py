"""Training: Parameters (shared weights and their gradients), ParameterDict (named sets,
saving and loading) and the optimizers behind `hb.Trainer`.
"""
