"""rlx.train_demo: the digits training demo (include/rlx/train/digits.h) driven from Python.

Skipped when the digits data file (scikit-learn's digits.csv.gz, or $RLX_DIGITS_PATH) is not
installed; scripts/install_deps.sh installs scikit-learn with --no-deps for it.
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest

import rlx

DATA = rlx.default_digits_path()
needs_data = pytest.mark.skipif(not DATA, reason="digits data not installed (scikit-learn)")


@needs_data
def test_mlp_two_epochs_learns():
    r = rlx.train_demo("mlp", epochs=2, seed=0)
    assert r["model"] == "mlp"
    assert [e["epoch"] for e in r["epochs"]] == [1, 2]
    losses = [e["train_loss"] for e in r["epochs"]]
    assert losses[1] < losses[0], losses
    assert r["epochs"][-1]["test_accuracy"] >= 0.90, r["epochs"]
    assert r["total_seconds"] > 0 and r["step_ms"] > 0
    assert r["total_seconds"] >= sum(e["seconds"] for e in r["epochs"])
    # 64-128-64-10 with biases.
    assert r["num_params"] == 64 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10
    assert r["steps"] == 2 * (r["train_size"] // 32)


@needs_data
def test_split_matches_data_file():
    # Independent reading of the CSV with numpy: row i is a test row iff i % 4 == 3.
    with gzip.open(DATA, "rt") as f:
        rows = np.loadtxt(f, delimiter=",")
    n = rows.shape[0]
    r = rlx.train_demo("mlp", epochs=1, seed=1, data=DATA)
    assert r["test_size"] == len(range(3, n, 4))
    assert r["train_size"] == n - r["test_size"]


@needs_data
def test_seeded_runs_repeat():
    a = rlx.train_demo("mlp", epochs=1, seed=3)
    b = rlx.train_demo("mlp", epochs=1, seed=3)
    assert a["epochs"][0]["train_loss"] == b["epochs"][0]["train_loss"]
    assert a["epochs"][0]["test_accuracy"] == b["epochs"][0]["test_accuracy"]


@needs_data
def test_cnn_runs_one_epoch():
    r = rlx.train_demo("cnn", epochs=1, seed=0)
    e = r["epochs"][0]
    assert np.isfinite(e["train_loss"]) and 0.0 <= e["test_accuracy"] <= 1.0
    # Better than chance (10 classes) after one epoch.
    assert e["test_accuracy"] > 0.2


def test_errors():
    with pytest.raises(rlx.Error, match="nope"):
        rlx.train_demo("nope", epochs=1)
    with pytest.raises(rlx.Error, match="digits: cannot open '/nonexistent/d.csv.gz'"):
        rlx.train_demo("mlp", epochs=1, data="/nonexistent/d.csv.gz")
    with pytest.raises(rlx.Error, match="epochs"):
        rlx.train_demo("mlp", epochs=-1)
