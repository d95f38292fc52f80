"""The one-line install: `pip install "keras @ git+URL"` of this repository's
committed HEAD, into a fresh virtual environment, builds the fork's wheel
through `tools/pep517.py`; that Keras, imported outside the checkout, then
saves and loads a model-parallel model on 8 CPU devices."""

import os
import shutil
import subprocess
import sys

import pytest

from tools.common import ROOT
from tools.common import TEST_ENV

CHECK = """
import jax
import keras
import numpy as np
from jax.sharding import PartitionSpec as P

assert "site-packages" in keras.__file__, keras.__file__
assert keras.__version__.startswith("3.15.1+shardwise."), keras.__version__
assert jax.device_count() == 8
mesh = keras.distribution.DeviceMesh((8,), ["model"])
layout_map = keras.distribution.LayoutMap(mesh)
layout_map[".*dense/kernel"] = (None, "model")
distribution = keras.distribution.ModelParallel(layout_map=layout_map)


def build():
    return keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(64, name="dense")]
    )


with distribution.scope():
    model = build()
    model.save_weights("model.weights.h5")
    with keras.utils.defer_initialization():
        other = build()
    other.load_weights("model.weights.h5")
for saved, loaded in zip(model.weights, other.weights):
    np.testing.assert_array_equal(saved.numpy(), loaded.numpy())
kernel = other.weights[0].value
assert kernel.sharding.spec == P(None, "model"), kernel.sharding
assert {s.data.shape for s in kernel.addressable_shards} == {(16, 8)}
print(keras.__version__)
"""


def test_pip_install_of_the_repository_loads_a_sharded_model(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of this repository")
    head = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # Only the venv may provide `keras`: not the tree on PYTHONPATH.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TEST_ENV)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = venv / "bin" / "python"
    # The README's command, with jax and Keras's dependencies constrained
    # to the versions of requirements.txt. pip 23 wants a host in a named
    # URL: `file://localhost/...`.
    install = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            f"keras @ git+file://localhost{ROOT}@{head}",
            "jax[cpu]",
            "-c",
            ROOT / "requirements.txt",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    (tmp_path / "check.py").write_text(CHECK)
    check = subprocess.run(
        [python, "check.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    # N: the number of patches in HEAD's series.
    series = subprocess.run(
        ["git", "-C", ROOT, "show", f"{head}:patches/series"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    patches = [n for n in series if n.strip() and not n.startswith("#")]
    assert check.stdout.split()[-1] == f"3.15.1+shardwise.{len(patches)}"
