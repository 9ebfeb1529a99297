"""Small real data that ships with a package: scikit-learn's bundled digits (no download).

The digits set holds 1,797 grey 8x8 images of handwritten digits (pixel values 0..16), ten
classes. It is tiny enough to train a 20-layer MLP on a laptop CPU in seconds and real enough
that "does it converge?" means something.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from . import seeding

__all__ = ["Split", "digits"]


@dataclass(frozen=True)
class Split:
    """A fixed train/test split of a classification set.

    - x_train: (N_train, D) float32, x_test: (N_test, D) float32.
    - y_train: (N_train,) int64 labels, y_test: (N_test,) int64 labels.
    - n_classes: number of classes.
    """

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    n_classes: int

    @property
    def n_features(self) -> int:
        return self.x_train.shape[1]

    def to(self, device) -> Split:
        """The same split with every tensor on ``device`` (a no-op copy-free view on CPU)."""
        return Split(
            self.x_train.to(device),
            self.y_train.to(device),
            self.x_test.to(device),
            self.y_test.to(device),
            self.n_classes,
        )


@lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(1797, 64) float32 pixels and (1797,) int64 labels of scikit-learn's bundled digits.

    Reads the CSV that ships inside scikit-learn directly: importing ``sklearn.datasets`` pulls
    in SciPy and costs seconds per kernel, the file costs milliseconds. Falls back to
    ``load_digits`` if the file is not where scikit-learn keeps it.
    """
    spec = importlib.util.find_spec("sklearn")
    path = (
        Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
        if spec
        else None
    )
    if path is not None and path.exists():
        table = np.loadtxt(path, delimiter=",", dtype=np.float64)
        x, y = table[:, :-1], table[:, -1]
    else:  # pragma: no cover - depends on scikit-learn's layout
        from sklearn.datasets import load_digits

        bunch = load_digits()
        x, y = bunch.data, bunch.target
    x, y = x.astype(np.float32), y.astype(np.int64)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def digits(test_fraction: float = 0.25, seed: int = 0, standardize: bool = True) -> Split:
    """scikit-learn's bundled digits as torch tensors with a fixed, stratified split.

    Inputs:
    - test_fraction: share of each class held out for testing, in (0, 1).
    - seed: permutation seed; the same seed gives the same split on every machine.
    - standardize: if True, scale pixels by the train set's global mean and std (one scalar
      each, so the relative pixel values stay as they are); if False, return raw 0..16 pixels.

    Returns a :class:`Split` with x of shape (N, 64) float32 and y of shape (N,) int64;
    with the default 0.25, N_train = 1,347 and N_test = 450.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    x, y = _digits_arrays()
    rng = seeding.rng(seed)
    # Stratify by hand so the split does not depend on scikit-learn's splitter internals.
    train_idx, test_idx = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_test = int(round(test_fraction * len(idx)))
        test_idx.append(idx[:n_test])
        train_idx.append(idx[n_test:])
    tr = rng.permutation(np.concatenate(train_idx))
    te = np.sort(np.concatenate(test_idx))
    xtr, xte = x[tr], x[te]
    if standardize:
        mu, sd = float(xtr.mean()), float(xtr.std())
        xtr, xte = (xtr - mu) / sd, (xte - mu) / sd
    return Split(
        x_train=torch.from_numpy(np.ascontiguousarray(xtr)),
        y_train=torch.from_numpy(y[tr]),
        x_test=torch.from_numpy(np.ascontiguousarray(xte)),
        y_test=torch.from_numpy(y[te]),
        n_classes=int(y.max()) + 1,
    )
