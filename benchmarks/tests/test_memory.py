"""Tests of the benchmark's per-device memory sampler."""

import os
import sys
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import memory  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

MIB = 2**20


def sharding(spec):
    mesh = Mesh(np.array(jax.devices()).reshape(1, 8), ("batch", "model"))
    return NamedSharding(mesh, spec)


def test_single_device_array_is_seen_on_its_device():
    before = memory.device_bytes()
    x = jax.device_put(np.ones((MIB,), np.float32), jax.devices()[3])
    after = memory.device_bytes()
    assert after[3] - before[3] == 4 * MIB
    for device in (0, 1, 2, 4, 5, 6, 7):
        assert after[device] == before[device]
    del x


def test_sharded_array_counted_once_per_shard_despite_aliases():
    before = memory.device_bytes()
    x = jax.device_put(np.ones((8, MIB), np.float32), sharding(P("model")))
    # `addressable_shards` creates single-device arrays that alias x's
    # buffers; they must not be counted again.
    shards = x.addressable_shards
    after = memory.device_bytes()
    for device in range(8):
        assert after[device] - before[device] == 4 * MIB
    assert memory.shard_bytes([x]) == {d: 4 * MIB for d in range(8)}
    del shards, x


def test_replicated_array_is_counted_on_every_device():
    x = jax.device_put(np.ones((MIB,), np.float32), sharding(P()))
    assert memory.shard_bytes([x]) == {d: 4 * MIB for d in range(8)}


def test_hooks_catch_a_transient_full_array_on_device_zero():
    # `device_put` of a device-0 array onto a sharding slices it on device
    # 0 first: the full array and its slices coexist only inside the call.
    value = jax.device_put(np.ones((8, MIB), np.float32), jax.devices()[0])
    sampler = memory.Sampler(interval=10.0)
    with sampler, memory.hooks(sampler):
        out = jax.device_put(value, sharding(P("model")))
        del value
    # Without the hooks, the sampler (which never wakes up here) would see
    # only the 32 MiB before the call and one 4 MiB shard after it.
    assert sampler.peak[0] >= 2 * 32 * MIB
    del out


def test_sampler_sees_an_array_that_lives_inside_one_call():
    def transient():
        x = jax.numpy.ones((8, MIB), np.float32, device=jax.devices()[0])
        return float((x + 1)[0, 0])

    before = memory.device_bytes()
    sampler = memory.Sampler(interval=10.0)
    with sampler:
        transient()
    # No transfer happens and the thread never wakes up: only the samples
    # at function returns see the 32 MiB of `x` and of `x + 1`.
    assert sampler.peak[0] - before[0] >= 2 * 32 * MIB


def test_sampler_sees_arrays_between_two_cached_jit_calls():
    double = jax.jit(lambda x: x * 2)
    x = jax.numpy.ones((8, MIB), np.float32, device=jax.devices()[0])
    double(double(x)).block_until_ready()  # compiled before the sampler

    def steps(x):
        t = double(x)
        u = double(t)
        del t
        return u

    before = memory.device_bytes()
    sampler = memory.Sampler(interval=10.0)
    with sampler:
        u = steps(x)
    # A cached jitted call runs in C++ and makes no profile event: only the
    # sample before `del t` sees `t` and `u` together.
    assert sampler.peak[0] - before[0] >= 2 * 32 * MIB
    del u, x


def test_jit_recorder_reports_temporaries():
    calls = []
    with memory.record_jits(calls):
        f = jax.jit(lambda x: (x * 2).sum())
        f(np.ones((1024, 1024), np.float32))
    assert len(calls) == 1
    assert memory.xla_temp_bytes(calls) >= 0
