"""The busiest device while a sharded keras-hub Llama is quantized.

Builds a `LlamaBackbone` (Llama-3-8B's head counts at hidden 1024,
bfloat16) under keras-hub's layout map, with the output embedding sharded
by its vocabulary, then runs `quantize("int8")` in the distribution's
scope. Prints the busiest device's float bytes before, its peak of live
arrays while quantizing (each buffer counted once, sampled around every
transfer, `memory.py`) and the ratio of the two. Run it with the tree to
measure on `PYTHONPATH`:

    PYTHONPATH=build/keras:. python -m benchmarks.quantize_peak --layers 8
    PYTHONPATH=build/keras-upstream:. python -m benchmarks.quantize_peak
"""

import argparse
import gc
import os
import warnings
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import keras  # noqa: E402
import keras_hub  # noqa: E402

from benchmarks import memory  # noqa: E402

MIB = 2**20


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocabulary", type=int, default=32000)
    parser.add_argument("--mode", default="int8", choices=("int8", "int4"))
    args = parser.parse_args()
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (1, len(devices)), ("batch", "model"), devices
    )
    layout_map = keras_hub.models.LlamaBackbone.get_layout_map(mesh)
    layout_map[".*token_embedding/reverse_embeddings"] = (None, "model")
    distribution = keras.distribution.ModelParallel(layout_map=layout_map)
    with distribution.scope():
        backbone = keras_hub.models.LlamaBackbone(
            vocabulary_size=args.vocabulary,
            num_layers=args.layers,
            num_query_heads=32,
            num_key_value_heads=8,
            hidden_dim=1024,
            intermediate_dim=3584,
            dtype="bfloat16",
        )
    gc.collect()
    before = memory.device_bytes()
    sampler = memory.Sampler()
    with warnings.catch_warnings(), distribution.scope():
        # Layers without `quantize()` warn.
        warnings.simplefilter("ignore")
        with sampler, memory.hooks(sampler):
            backbone.quantize(args.mode)
    gc.collect()
    after = memory.device_bytes()
    busiest = max(before, key=lambda d: sampler.peak[d] / before[d])
    print(
        f"keras {keras.__version__} from {Path(keras.__file__).parents[1]}, "
        f"{args.layers} layers, "
        f"{args.mode}, {len(devices)} devices: busiest device "
        f"{before[busiest] / MIB:.1f} MiB float before, peak "
        f"{sampler.peak[busiest] / MIB:.1f} MiB "
        f"({sampler.peak[busiest] / before[busiest]:.3f} times), "
        f"{after[busiest] / MIB:.1f} MiB after"
    )


if __name__ == "__main__":
    main()
