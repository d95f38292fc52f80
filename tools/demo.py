"""Builds a small model-parallel model on 8 CPU devices and prints where
each variable's shards live. Run with `make demo`."""

import keras
import numpy as np
from keras import layers


def main():
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (1, len(devices)), axis_names=("batch", "model"), devices=devices
    )
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*embedding/embeddings"] = (None, "model")
    layout_map[".*dense/kernel"] = (None, "model")
    keras.distribution.set_distribution(
        keras.distribution.ModelParallel(layout_map=layout_map)
    )
    model = keras.Sequential(
        [
            keras.Input((16,), dtype="int32"),
            layers.Embedding(32000, 512, name="embedding"),
            layers.Dense(2048, name="dense"),
        ]
    )
    print(f"keras {keras.__version__}, {len(devices)} devices")
    for variable in model.weights:
        value = variable.value
        shards = value.addressable_shards
        print(
            f"{variable.path:28} shape={tuple(value.shape)} "
            f"spec={value.sharding.spec} shards={len(shards)} "
            f"shard_shape={shards[0].data.shape} "
            f"MiB/device={shards[0].data.nbytes / 2**20:.2f}"
        )
    output = model(np.zeros((2, 16), "int32"))
    print(f"forward pass: output shape {tuple(output.shape)}")


if __name__ == "__main__":
    main()
