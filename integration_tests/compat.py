"""Writes or reads checkpoints of one model, with the Keras on PYTHONPATH.

Usage (`test_save_compat.py` runs it, once with each tree):
  python -m integration_tests.compat save|load DIR

`save` builds the model sharded over 8 CPU devices with a fixed seed and
writes `.weights.h5`, a sharded `.weights.json` and a `.keras` archive to
DIR, with the values in DIR/reference.npz. `load` builds the model with
another seed, loads each file into it and checks every value bitwise.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import keras  # noqa: E402
import numpy as np  # noqa: E402

FILES = ("model.weights.h5", "model.weights.json", "model.keras")


def distribution():
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (2, len(devices) // 2), ("batch", "model"), devices
    )
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*embedding/embeddings"] = (None, "model")
    layout_map[".*dense/kernel"] = ("model", None)
    layout_map[".*half/kernel"] = ("batch", "model")
    return keras.distribution.ModelParallel(layout_map=layout_map)


def build(seed):
    keras.utils.set_random_seed(seed)
    with distribution().scope():
        return keras.Sequential(
            [
                keras.Input((4,), dtype="int32"),
                keras.layers.Embedding(512, 64, name="embedding"),
                keras.layers.Dense(32, name="dense"),
                keras.layers.Dense(16, name="half", dtype="bfloat16"),
            ]
        )


def values(model):
    return [np.asarray(w.value).astype("float32") for w in model.weights]


def save(folder):
    model = build(seed=1)
    model.save_weights(folder / FILES[0])
    model.save_weights(folder / FILES[1], max_shard_size=0.0002)
    model.save(folder / FILES[2])
    np.savez(folder / "reference.npz", *values(model))


def load(folder):
    with np.load(folder / "reference.npz") as data:
        reference = [data[f"arr_{i}"] for i in range(len(data.files))]
    for name in FILES:
        if name.endswith(".keras"):
            with distribution().scope():
                model = keras.saving.load_model(folder / name)
        else:
            model = build(seed=2)
            model.load_weights(folder / name)
        for value, expected in zip(values(model), reference):
            np.testing.assert_array_equal(value, expected, err_msg=name)
    print(f"loaded {len(FILES)} files with keras {keras.__version__}")


if __name__ == "__main__":
    {"save": save, "load": load}[sys.argv[1]](Path(sys.argv[2]))
