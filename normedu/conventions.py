"""The course's numeric conventions, decided once (PyTorch's defaults).

Every module that needs a default eps or BatchNorm momentum reads it from here, so that a
change of convention is one edit. Torch-free and numpy-free: the grading kernels import it.
"""

__all__ = ["DEFAULT_EPS", "DEFAULT_MOMENTUM", "QK_NORM_EPS"]

#: eps added to the variance (or mean square) inside the square root, as in ``torch.nn``.
DEFAULT_EPS = 1e-5

#: BatchNorm's running-statistics momentum on the NEW value:
#: ``running = (1 - momentum) * running + momentum * batch_stat`` (``torch.nn.BatchNorm*d``).
DEFAULT_MOMENTUM = 0.1

#: eps inside the RMS of QK-norm's queries and keys (``qk_norm_attention``'s default, the
#: exercise's contract): smaller than DEFAULT_EPS, as in the per-head norms of recent models.
QK_NORM_EPS = 1e-6
