"""The one-line install: `pip install "keras @ git+URL"` of this repository's
committed HEAD, into a fresh virtual environment, builds the fork's wheel
through `tools/pep517.py`; that Keras, imported outside the checkout, then
saves and loads a model-parallel model on 8 CPU devices. The README's
`"keras-hub @ git+URL#subdirectory=hub"` builds the patched keras-hub's
wheel the same way (`hub/backend.py`), whose `from_preset` then loads a
sharded preset with no scope of the user's."""

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


HUB_CHECK = """
import keras
import keras_hub
import numpy as np

assert "site-packages" in keras_hub.__file__, keras_hub.__file__
backbone = keras_hub.models.Llama3Backbone(
    vocabulary_size=64,
    num_layers=1,
    num_query_heads=8,
    num_key_value_heads=8,
    hidden_dim=64,
    intermediate_dim=128,
)
backbone.save_to_preset("preset")
mesh = keras.distribution.DeviceMesh((1, 8), ["batch", "model"])
layout_map = keras_hub.models.Llama3Backbone.get_layout_map(mesh)
distribution = keras.distribution.ModelParallel(
    layout_map=layout_map, batch_dim_name="batch"
)
with distribution.scope():
    # No `defer_initialization()`: the patched `from_preset` builds the
    # backbone without values itself.
    loaded = keras_hub.models.Backbone.from_preset("preset")
for saved, weight in zip(backbone.weights, loaded.weights):
    np.testing.assert_array_equal(saved.numpy(), weight.numpy())
embeddings = loaded.get_layer("token_embedding").embeddings.value
shapes = {s.data.shape for s in embeddings.addressable_shards}
assert shapes == {(8, 64)}, shapes
print(keras_hub.__version__)
"""


def _series_length(head, folder):
    series = subprocess.run(
        ["git", "-C", ROOT, "show", f"{head}:{folder}/series"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return len([n for n in series if n.strip() and not n.startswith("#")])


def _run_in(venv_python, args, cwd, env):
    """Runs `venv_python args...` in `cwd`; fails the test with its
    output unless it exits with 0."""
    result = subprocess.run(
        [venv_python, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with the README's install of the committed HEAD:
    (python, env, head, the install's folder)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of this repository")
    tmp_path = tmp_path_factory.mktemp("install")
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
    _run_in(
        python,
        [
            "-m",
            "pip",
            "install",
            "-q",
            f"keras @ git+file://localhost{ROOT}@{head}",
            "jax[cpu]",
            "-c",
            ROOT / "requirements.txt",
        ],
        tmp_path,
        env,
    )
    return python, env, head, tmp_path


def test_pip_install_of_the_repository_loads_a_sharded_model(installed):
    python, env, head, tmp_path = installed
    (tmp_path / "check.py").write_text(CHECK)
    check = _run_in(python, ["check.py"], tmp_path, env)
    # N: the number of patches in HEAD's series.
    n = _series_length(head, "patches")
    assert check.stdout.split()[-1] == f"3.15.1+shardwise.{n}"


def test_pip_install_of_hub_loads_a_preset_sharded(installed):
    python, env, head, tmp_path = installed
    # The README's keras-hub requirement, without keras-hub's declared
    # dependencies (tensorflow-text brings TensorFlow): the ones its
    # tokenizers import, at requirements-test.txt's versions (not the
    # file itself, which pins keras-hub 0.32.0).
    wanted = ("regex==", "tokenizers==", "sentencepiece==")
    pins = [
        line
        for line in (ROOT / "requirements-test.txt").read_text().splitlines()
        if line.lower().startswith(wanted)
    ]
    assert len(pins) == len(wanted), pins
    _run_in(
        python,
        [
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            f"keras-hub @ git+file://localhost{ROOT}@{head}#subdirectory=hub",
            *pins,
        ],
        tmp_path,
        env,
    )
    (tmp_path / "check_hub.py").write_text(HUB_CHECK)
    check = _run_in(python, ["check_hub.py"], tmp_path, env)
    n = _series_length(head, "patches-hub")
    assert check.stdout.split()[-1] == f"0.32.0+shardwise.{n}"
