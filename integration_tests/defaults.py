"""What a model outside any `keras.distribution` does, with the Keras on
PYTHONPATH: bytes written and read by its saves and loads, the members
of its `.keras` files, its seeded initial values, the size of a pickled
variable and the errors of a mismatched load and assign, printed as
JSON.

Usage (`test_defaults.py` runs it, once with each tree):
  python -m integration_tests.defaults DIR
"""

import hashlib
import json
import os
import pickle
import sys
import zipfile
from pathlib import Path
from unittest import mock

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import keras  # noqa: E402
import numpy as np  # noqa: E402


def io_counter(name):
    """`rchar` or `wchar` of this process: bytes read or written by system
    calls, page cache or not."""
    with open("/proc/self/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == name:
                return int(value)
    raise RuntimeError(f"no {name} in /proc/self/io")


def counted(name, function):
    before = io_counter(name)
    function()
    return io_counter(name) - before


def build(units=4096, seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((2048,)),
            keras.layers.Dense(units, name="dense"),
            keras.layers.Dense(8, name="head", kernel_initializer="he_normal"),
        ]
    )


def archive_members(model, path, memory_short):
    """Name, mode bits, compression and size of each member of the `.keras`
    file that `model.save()` writes, with memory short or not."""
    from keras.src.saving import saving_lib

    sufficient = mock.Mock(return_value=not memory_short)
    with mock.patch.object(saving_lib, "is_memory_sufficient", sufficient):
        model.save(path)
    with zipfile.ZipFile(path) as archive:
        return [
            [
                info.filename,
                info.external_attr,
                info.compress_type,
                info.file_size,
            ]
            for info in archive.infolist()
        ]


class Shaped:
    """A value that has a shape but is not an array."""

    shape = (16, 8)

    def __repr__(self):
        return "Shaped()"


def assign_errors():
    """The errors of `Variable.assign()` given a value of another shape: an
    array, and a value that cannot be converted to one."""
    variable = keras.Variable(np.zeros((4, 8)), name="v")
    errors = []
    for value in (np.ones((16, 8)), Shaped()):
        try:
            variable.assign(value)
        except Exception as e:
            errors.append([type(e).__name__, str(e)])
    return errors


def main(folder):
    folder = Path(folder)
    # Imports that the first save and load make, outside the counts.
    small = build(units=8)
    small.save(folder / "small.keras")
    keras.saving.load_model(folder / "small.keras")
    small.save_weights(folder / "small.weights.h5")
    small.load_weights(folder / "small.weights.h5")
    small.load_weights(folder / "small.keras")

    model = build()
    keras_file = folder / "model.keras"
    h5_file = folder / "model.weights.h5"
    result = {
        "save": counted("wchar", lambda: model.save(keras_file)),
        "save_weights": counted("wchar", lambda: model.save_weights(h5_file)),
        "load_model": counted(
            "rchar", lambda: keras.saving.load_model(keras_file)
        ),
        "load_weights_h5": counted(
            "rchar", lambda: model.load_weights(h5_file)
        ),
        "load_weights_keras": counted(
            "rchar", lambda: model.load_weights(keras_file)
        ),
        "keras_file_bytes": keras_file.stat().st_size,
        "h5_file_bytes": h5_file.stat().st_size,
        "initial_values": [
            hashlib.sha256(np.asarray(w).tobytes()).hexdigest()
            for w in build().weights
        ],
    }
    try:
        build(units=16).load_weights(h5_file)
    except Exception as e:
        result["mismatch_error"] = [type(e).__name__, str(e)]
    result["assign_errors"] = assign_errors()
    variable = keras.Variable(np.zeros((4, 8)), name="pickled")
    result["pickled_variable_bytes"] = len(pickle.dumps(variable))
    result["archive_members"] = [
        archive_members(model, folder / "members.keras", memory_short)
        for memory_short in (False, True)
    ]
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
