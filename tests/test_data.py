"""normedu.data: the digits loader (fixed, stratified, no download)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normedu.data import digits


@pytest.fixture(scope="module")
def reference():
    """scikit-learn's own digits, the reference the loader must match. Imported here, not at
    the top: ``sklearn.datasets`` costs each pytest worker about 1.5 s of CPU to collect."""
    from sklearn.datasets import load_digits

    return load_digits()


def test_shapes_dtypes_and_sizes():
    s = digits()
    assert s.x_train.shape == (1347, 64) and s.x_test.shape == (450, 64)
    assert s.x_train.dtype == torch.float32 and s.y_train.dtype == torch.int64
    assert s.n_classes == 10 and s.n_features == 64


def test_split_is_a_partition_of_the_bundled_set(reference):
    raw = digits(standardize=False)
    got = np.concatenate([raw.x_train.numpy(), raw.x_test.numpy()])
    lab = np.concatenate([raw.y_train.numpy(), raw.y_test.numpy()])
    # Same multiset of (image, label) rows as scikit-learn's array, nothing lost or duplicated.
    key = lambda x, y: sorted(map(bytes, np.c_[x.astype(np.int64), y]))  # noqa: E731
    assert key(got, lab) == key(reference.data, reference.target)


def test_split_is_stratified_and_deterministic(reference):
    a, b = digits(), digits()
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    counts_test = np.bincount(a.y_test.numpy(), minlength=10)
    counts_all = np.bincount(reference.target, minlength=10)
    assert np.all(np.abs(counts_test - 0.25 * counts_all) <= 1)
    other = digits(seed=1)
    assert not torch.equal(a.y_train, other.y_train)


def test_standardization_uses_train_statistics():
    s, raw = digits(), digits(standardize=False)
    mu, sd = raw.x_train.mean(), raw.x_train.std(unbiased=False)
    torch.testing.assert_close(s.x_test, (raw.x_test - mu) / sd, rtol=1e-5, atol=1e-5)
    assert abs(float(s.x_train.mean())) < 1e-5


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_bad_fraction(bad):
    with pytest.raises(ValueError, match="test_fraction"):
        digits(test_fraction=bad)
