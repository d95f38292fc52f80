"""Two ways to quantize a sharded kernel to int8, side by side.

The series computes each device's int8 shard from its float shard on the
host (`abs_max_quantize(to_numpy=True)`, 0010); the other way is one
`jax.jit` with the result's sharding. Prints, for each, the busiest
device's bytes over its float shard, the time, and whether the codes and
scales are equal.

    PYTHONPATH=build/keras python -m benchmarks.quantize_paths \\
        --shape 4096 16384 --sharded columns
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from keras.src.quantizers import quantizers  # noqa: E402


def busiest_device_bytes():
    """The live bytes of the busiest device, each buffer counted once."""
    per_device, seen = {}, set()
    for array in jax.live_arrays():
        for shard in array.addressable_shards:
            key = (shard.device, shard.data.unsafe_buffer_pointer())
            if key not in seen:
                seen.add(key)
                per_device[shard.device] = (
                    per_device.get(shard.device, 0) + shard.data.nbytes
                )
    return max(per_device.values())


def on_device(x):
    scale = 127.0 / (jnp.max(jnp.abs(x), axis=0, keepdims=True) + 1e-7)
    codes = jnp.clip(jnp.round(x * scale), -127, 127).astype("int8")
    return codes, scale


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", type=int, nargs=2, default=(4096, 16384))
    parser.add_argument(
        "--sharded", choices=("rows", "columns"), default="columns"
    )
    args = parser.parse_args()
    mesh = Mesh(np.array(jax.devices()).reshape(1, -1), ("batch", "model"))
    spec = P(None, "model") if args.sharded == "columns" else P("model", None)
    sharding = NamedSharding(mesh, spec)
    kernel = jax.jit(
        lambda key: jax.random.normal(key, args.shape, "float32"),
        out_shardings=sharding,
    )(jax.random.key(0))
    float_shard = kernel.addressable_shards[0].data.nbytes

    start = time.perf_counter()
    host_codes, host_scale = quantizers.abs_max_quantize(
        kernel, axis=0, to_numpy=True
    )
    host_codes.block_until_ready()
    seconds = time.perf_counter() - start
    ratio = busiest_device_bytes() / float_shard
    print(f"host slices: {ratio:.2f} x float shard, {seconds:.2f} s")

    jitted = jax.jit(
        on_device, out_shardings=(sharding, NamedSharding(mesh, P()))
    )
    memory = jitted.lower(kernel).compile().memory_analysis()
    start = time.perf_counter()
    codes, scale = jitted(kernel)
    codes.block_until_ready()
    seconds = time.perf_counter() - start
    peak = (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
    )
    print(
        f"jit: {peak / float_shard:.2f} x float shard (XLA's memory "
        f"analysis), {seconds:.2f} s without compiling"
    )
    print(
        "equal: codes",
        bool((np.asarray(codes) == np.asarray(host_codes)).all()),
        "scales",
        bool((np.asarray(scale) == np.asarray(host_scale)).all()),
    )


if __name__ == "__main__":
    main()
