"""keras-hub 0.32.0 backbones with the head counts of real presets, built
with their own `get_layout_map` on every device of the run (8 in `make
test`, 16 in its keras-hub stage): the layouts that do not divide are
repaired, the weights of an unsharded copy load exactly and predictions
match it. `keras.distribution.plan_memory()` gives the bytes that the load
and Adam then place on each device, and plans the full-size Llama-3-8B and
Gemma-7B without placing anything.

Widths are narrow; what matters is the dimension that the mesh does not
divide (see `../shared/reference/keras-hub-real-models.md`)."""

import math
import re
import warnings

import jax
import keras
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

keras_hub = pytest.importorskip("keras_hub")

VOCABULARY = 256

# name: (backbone class, arguments). Head counts, KV head counts, head_dim
# (Gemma) and expert counts are those of the real presets.
MODELS = {
    "gemma_2b": (
        "GemmaBackbone",
        dict(
            num_query_heads=8,
            num_key_value_heads=1,
            head_dim=256,
            hidden_dim=64,
            intermediate_dim=256,
        ),
    ),
    "gemma2_2b": (
        "GemmaBackbone",
        dict(
            num_query_heads=8,
            num_key_value_heads=4,
            head_dim=256,
            hidden_dim=64,
            intermediate_dim=256,
            query_head_dim_normalize=False,
            use_post_ffw_norm=True,
            use_post_attention_norm=True,
            attention_logit_soft_cap=50.0,
            final_logit_soft_cap=30.0,
            use_sliding_window_attention=True,
            sliding_window_size=4,
        ),
    ),
    "qwen2.5_1.5b": (
        "QwenBackbone",
        dict(
            num_query_heads=12,
            num_key_value_heads=2,
            hidden_dim=12 * 16,
            intermediate_dim=128,
        ),
    ),
    "qwen2.5_7b": (
        "QwenBackbone",
        dict(
            num_query_heads=28,
            num_key_value_heads=4,
            hidden_dim=28 * 16,
            intermediate_dim=128,
        ),
    ),
    "qwen1.5_moe_2.7b": (
        "QwenMoeBackbone",
        dict(
            num_query_heads=16,
            num_key_value_heads=16,
            hidden_dim=64,
            intermediate_dim=128,
            moe_intermediate_dim=32,
            shared_expert_intermediate_dim=128,
            num_experts=60,
            top_k=4,
        ),
    ),
}

GEMMA = "decoder_block_1/attention/{}/kernel"
QWEN_OUTPUT = "transformer_layer_1/self_attention/attention_output/kernel"
# Auto-named: the block's suffix depends on the models built before.
ROUTER = (
    r"transformer_layer_1/qwen_sparse_moe_block_\d+/"
    "sparse_feedforward_gate_dense/kernel"
)
# KV heads (1 or 4) move to head_dim (256).
GEMMA_KV = {
    GEMMA.format("key"): P(None, "batch", "model"),
    GEMMA.format("value"): P(None, "batch", "model"),
}
# On 16 devices, the 8 query heads of the query and output kernels too.
GEMMA_KV_AND_HEADS = {
    **GEMMA_KV,
    GEMMA.format("query"): P(None, "batch", "model"),
    GEMMA.format("attention_output"): P(None, "model", "batch"),
}

# (model, number of devices): {path pattern in the second block: layout
# used}. The same variables of the first block are repaired too, and
# nothing else.
REPAIRED = {
    ("gemma_2b", 8): GEMMA_KV,
    ("gemma_2b", 16): GEMMA_KV_AND_HEADS,
    ("gemma2_2b", 8): GEMMA_KV,
    ("gemma2_2b", 16): GEMMA_KV_AND_HEADS,
    # attention_output's query heads (12, 28) move to head_dim (16).
    ("qwen2.5_1.5b", 8): {QWEN_OUTPUT: P(None, "model", "batch")},
    ("qwen2.5_1.5b", 16): {QWEN_OUTPUT: P(None, "model", "batch")},
    ("qwen2.5_7b", 8): {QWEN_OUTPUT: P(None, "model", "batch")},
    ("qwen2.5_7b", 16): {QWEN_OUTPUT: P(None, "model", "batch")},
    # The router's 60 experts: its other dimension holds the batch axis,
    # so it is replicated along the model axis.
    ("qwen1.5_moe_2.7b", 8): {ROUTER: P("batch", None)},
    ("qwen1.5_moe_2.7b", 16): {ROUTER: P("batch", None)},
}


def make_backbone(name):
    class_name, arguments = MODELS[name]
    backbone_class = getattr(keras_hub.models, class_name)
    return backbone_class(vocabulary_size=VOCABULARY, num_layers=2, **arguments)


def spec_of(variable):
    # JAX drops trailing `None`s from the specs of computed arrays.
    spec = tuple(variable.value.sharding.spec)
    return spec + (None,) * (len(variable.shape) - len(spec))


def check_repaired(backbone, repaired):
    """Checks the layout of each variable of `repaired`; returns them."""
    variables = []
    for pattern, spec in repaired.items():
        (variable,) = [
            v for v in backbone.weights if re.fullmatch(pattern, v.path)
        ]
        assert spec_of(variable) == tuple(spec), variable.path
        variables.append(variable)
    return variables


@pytest.mark.parametrize("name", sorted(MODELS))
def test_backbone_builds_loads_and_predicts(name, tmp_path):
    num_devices = jax.device_count()
    inputs = {
        "token_ids": np.arange(16, dtype="int32").reshape((2, 8)) * 13 % 256,
        "padding_mask": np.ones((2, 8), "int32"),
    }
    keras.utils.set_random_seed(1)
    unsharded = make_backbone(name)
    weights_file = tmp_path / "model.weights.h5"
    unsharded.save_weights(weights_file)
    expected_weights = [v.numpy() for v in unsharded.weights]
    expected_outputs = unsharded.predict(inputs, verbose=0)

    mesh = keras.distribution.DeviceMesh(
        (1, num_devices), ("batch", "model"), keras.distribution.list_devices()
    )
    backbone_class = getattr(keras_hub.models, MODELS[name][0])
    distribution = keras.distribution.ModelParallel(
        layout_map=backbone_class.get_layout_map(mesh),
        batch_dim_name="batch",
        repair_layouts=True,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with distribution.scope():
            backbone = make_backbone(name)
    repairs = [str(w.message) for w in caught if "sharded as" in str(w)]
    repaired = REPAIRED[(name, num_devices)]
    # One warning per repaired variable, in each of the two blocks.
    assert len(repairs) == 2 * len(repaired), repairs
    for variable in check_repaired(backbone, repaired):
        assert any(f"'{variable.path}' of shape" in r for r in repairs)

    backbone.load_weights(weights_file)
    for variable, value in zip(backbone.weights, expected_weights):
        np.testing.assert_array_equal(variable.numpy(), value)
        assert len(variable.value.addressable_shards) == num_devices
    check_repaired(backbone, repaired)
    np.testing.assert_allclose(
        backbone.predict(inputs, verbose=0),
        expected_outputs,
        rtol=1e-5,
        atol=1e-5,
    )


def device_bytes(arrays):
    totals = {}
    for array in arrays:
        for shard in array.addressable_shards:
            device = f"{shard.device.platform}:{shard.device.id}"
            totals[device] = totals.get(device, 0) + shard.data.nbytes
    return totals


def new_arrays(before):
    existing = {id(array) for array in before}
    return [a for a in jax.live_arrays() if id(a) not in existing]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_plan_equals_bytes_placed_by_load_and_optimizer(name, tmp_path):
    """`plan_memory()` of a backbone built without values, repaired layouts
    included, equals the bytes that loading it and building Adam place on
    each device."""
    weights_file = tmp_path / "model.weights.h5"
    make_backbone(name).save_weights(weights_file)
    mesh = keras.distribution.DeviceMesh(
        (1, jax.device_count()),
        ("batch", "model"),
        keras.distribution.list_devices(),
    )
    backbone_class = getattr(keras_hub.models, MODELS[name][0])
    distribution = keras.distribution.ModelParallel(
        layout_map=backbone_class.get_layout_map(mesh),
        batch_dim_name="batch",
        repair_layouts=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with distribution.scope(), keras.utils.defer_initialization():
            backbone = make_backbone(name)
            before = jax.live_arrays()
            plan = keras.distribution.plan_memory(backbone, optimizer="adam")
            assert new_arrays(before) == []
        backbone.load_weights(weights_file)
    loaded = device_bytes(v.value for v in backbone.weights)
    assert plan.variable_bytes == loaded
    with distribution.scope():
        optimizer = keras.optimizers.Adam()
        before = jax.live_arrays()
        optimizer.build(backbone.trainable_variables)
    assert plan.optimizer_bytes == device_bytes(new_arrays(before))


@pytest.mark.parametrize(
    "name, dtype",
    [
        ("Llama-3-8B", "bfloat16"),
        ("Gemma-7B", "bfloat16"),
        ("Llama-3-70B", "int8"),
    ],
)
def test_full_size_plan_places_nothing(name, dtype):
    """The real configurations, 8.0, 8.5 and 70.6 billion parameters, are
    planned with Adam from a backbone built without values: no device array
    is created, and each device's figure is the sum of its shards (int8
    variables are not trained)."""
    from tools.plan import MODELS as FULL_SIZE
    from tools.plan import int8_policy

    backbone_class, config, _ = FULL_SIZE[name]
    mesh = keras.distribution.DeviceMesh(
        (1, jax.device_count()),
        ("batch", "model"),
        keras.distribution.list_devices(),
    )
    distribution = keras.distribution.ModelParallel(
        layout_map=backbone_class.get_layout_map(mesh),
        batch_dim_name="batch",
        repair_layouts=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with distribution.scope(), keras.utils.defer_initialization():
            policy = int8_policy() if dtype == "int8" else dtype
            backbone = backbone_class(dtype=policy, **config)
            before = jax.live_arrays()
            plan = keras.distribution.plan_memory(backbone, optimizer="adam")
            assert new_arrays(before) == []
    assert backbone.count_params() > 8e9
    axis_sizes = dict(zip(mesh.axis_names, mesh.shape))
    expected = trained = 0
    for variable in backbone.weights:
        shards = math.prod(
            axis_sizes[a] for a in variable._layout.axes if a is not None
        )
        size = math.prod(variable.shape) // shards
        expected += size * jax.numpy.dtype(variable.dtype).itemsize
        if variable.trainable:
            trained += size * jax.numpy.dtype(variable.dtype).itemsize
    devices = keras.distribution.list_devices()
    assert plan.variable_bytes == dict.fromkeys(devices, expected)
    # Adam's two moments, in the dtype and layout of each trained variable.
    assert plan.optimizer_bytes == dict.fromkeys(devices, 2 * trained)
