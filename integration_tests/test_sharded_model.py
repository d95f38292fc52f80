"""End-to-end checks of the materialized tree: a model-parallel model on 8
CPU devices is built, saved and loaded with its sharding intact."""

from pathlib import Path

import jax
import keras
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from integration_tests.conftest import TREE
from tools.common import ROOT
from tools.upstream import read_pin


def test_keras_comes_from_the_tree():
    assert Path(keras.__file__).resolve().is_relative_to(TREE)
    # The version of the tree's base: 3.15.1, or the nightly of `NEXT`.
    pin = ROOT / ("NEXT" if TREE.name == "keras-next" else "UPSTREAM")
    assert keras.__version__ == read_pin(pin)["version"]
    assert keras.backend.backend() == "jax"
    assert jax.device_count() == 8


@pytest.fixture
def model_parallel():
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (1, 8), axis_names=("batch", "model"), devices=devices
    )
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*embedding/embeddings"] = (None, "model")
    layout_map[".*dense/kernel"] = ("model", None)
    distribution = keras.distribution.ModelParallel(layout_map=layout_map)
    with distribution.scope():
        yield


def build_model():
    return keras.Sequential(
        [
            keras.Input((4,), dtype="int32"),
            keras.layers.Embedding(512, 64, name="embedding"),
            keras.layers.Dense(32, name="dense"),
        ]
    )


def test_save_and_load_weights_keep_layouts(model_parallel, tmp_path):
    model = build_model()
    embeddings, kernel, _ = model.weights
    assert embeddings.value.sharding.spec == P(None, "model")
    assert kernel.value.sharding.spec == P("model", None)
    assert embeddings.value.addressable_shards[0].data.shape == (512, 8)
    expected = [w.numpy() for w in model.weights]
    path = tmp_path / "model.weights.h5"
    model.save_weights(path)

    other = build_model()
    other.load_weights(path)
    for variable, value in zip(other.weights, expected):
        np.testing.assert_array_equal(variable.numpy(), value)
    assert other.weights[0].value.sharding.spec == P(None, "model")
    assert other.weights[1].value.sharding.spec == P("model", None)


def lora_model():
    return keras.Sequential(
        [keras.Input((1024,)), keras.layers.Dense(4096, name="dense")]
    )


def assert_each_device_at_most_one_more_shard(fn, *args):
    """Runs `fn(*args)` under the benchmark's live-array sampler: no device
    may grow by more than one shard of `lora_model()`'s kernel (1.1, for
    the small arrays beside it)."""
    from benchmarks import memory

    baseline = memory.device_bytes()
    sampler = memory.Sampler(interval=0.001)
    with sampler, memory.hooks(sampler):
        fn(*args)
    shard = 1024 * 4096 * 4 // 8
    for device in range(8):
        assert sampler.peak[device] - baseline[device] <= 1.1 * shard, device


def test_lora_load_keeps_each_device_at_its_shards(model_parallel, tmp_path):
    """Loading a model whose sharded `Dense` has LoRA enabled never computes
    the merged kernel (LoRA factors replicated, their product full-size on
    every device): each device peaks at its old and new kernel shards."""
    path = tmp_path / "model.weights.h5"
    lora_model().save_weights(path)
    model = lora_model()
    model.layers[0].enable_lora(4)
    assert_each_device_at_most_one_more_shard(model.load_weights, path)


def test_lora_save_merges_the_kernel_in_its_layout(model_parallel, tmp_path):
    """Saving a model whose sharded `Dense` has LoRA enabled computes the
    merged kernel in the kernel's layout: no device holds the full product
    of the (replicated) LoRA factors, and the file holds the merge."""
    model = lora_model()
    layer = model.layers[0]
    layer.enable_lora(4)
    layer.lora_kernel_b.assign(np.full((4, 4096), 0.5, "float32"))
    expected = layer._kernel.numpy() + (
        layer.lora_kernel_a.numpy() @ layer.lora_kernel_b.numpy()
    ) * (layer.lora_alpha / layer.lora_rank)
    path = tmp_path / "model.weights.h5"
    assert_each_device_at_most_one_more_shard(model.save_weights, path)
    saved = lora_model()
    saved.load_weights(path)
    np.testing.assert_allclose(saved.layers[0].kernel.numpy(), expected)
