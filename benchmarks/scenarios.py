"""One benchmark scenario, run in a fresh process of one build's venv.

Usage (the runner, `run.py`, calls it):
  python scenarios.py prepare --data DIR [--size MIB] [--blocks N]
                             [--scenarios a,b,...]
  python scenarios.py files --data DIR [--scenarios a,b,...]
  python scenarios.py SCENARIO --data DIR --mode memory|time|config
                               --out FILE [--warm-bytes N]

`prepare` writes the checkpoints the load scenarios read; `files` prints
which checkpoint each scenario reads (JSON, paths relative to the data
directory). In `memory` mode the measured section runs under the per-device
sampler, the transfer hooks and the jit recorder (see memory.py); in `time`
mode it runs bare. `config` mode (`load_model_*` only) times building the
model from the `.keras` archive's config alone.
"""

import argparse
import contextlib
import inspect
import json
import os
import shutil
import sys
import time
import warnings
import zipfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import configs  # noqa: E402
import hf_checkpoint  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import memory  # noqa: E402
import numpy as np  # noqa: E402
from reads import read_into  # noqa: E402

EMBED_DIM = 2048
HIDDEN = 1024
FFW = 4096
HEADS = 8
VOCAB = 32000
SEQUENCE = 8


def embedding_rows(size_mib):
    return size_mib * 2**20 // (EMBED_DIM * 4)


def distribution(family):
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (1, len(devices)), axis_names=("batch", "model"), devices=devices
    )
    if family in KERAS_HUB:
        import keras_hub

        # keras-hub's own layout map, as its users write it.
        if family.startswith("gemma"):
            backbone_class = keras_hub.models.GemmaBackbone
        else:
            backbone_class = keras_hub.models.LlamaBackbone
        layout_map = backbone_class.get_layout_map(mesh)
        if family in ("llama_bf16", "llama_hf_bf16"):
            # It leaves the output embedding replicated: whole on every
            # device, its bfloat16 values alone would be 1.3 times a
            # device's int8 shards while they are quantized.
            layout_map[".*token_embedding/reverse_embeddings"] = (
                None,
                "model",
            )
        return _model_parallel(layout_map)
    layout_map = keras.distribution.LayoutMap(mesh)
    if family == "embedding":
        layout_map[".*embedding/embeddings"] = (None, "model")
    elif family == "embedding_rows":
        layout_map[".*embedding/embeddings"] = ("model", None)
    elif family in ("kernels", "blocks"):
        layout_map[".*dense_\\d+/kernel"] = (None, "model")
    elif family == "quantize":
        layout_map["^dense/kernel"] = (None, "model")
        layout_map[".*einsum_dense/kernel"] = ("model", None)
    elif family == "lora_dense":
        layout_map[".*dense.*/kernel"] = (None, "model")
    elif family == "qwen":
        # keras-hub's Qwen layout map: attention_output is sharded on its
        # 28 query heads, which a model axis of 8 does not divide.
        layout_map[".*token_embedding/embeddings"] = ("model", "batch")
        layout_map[".*_(query|key|value)/kernel"] = ("model", "batch", None)
        layout_map[".*_attention_output/kernel"] = ("model", None, "batch")
        layout_map[".*_ffw_(gate|intermediate)/kernel"] = ("batch", "model")
        layout_map[".*_ffw_output/kernel"] = ("model", "batch")
    else:
        # The way keras-hub's Gemma layout map shards a decoder.
        layout_map[".*token_embedding/embeddings"] = ("model", "batch")
        layout_map[".*attention_(query|key|value)/kernel"] = (
            "model",
            "batch",
            None,
        )
        layout_map[".*attention_output/kernel"] = ("model", None, "batch")
        layout_map[".*ffw_gating.*/kernel"] = ("batch", "model")
        layout_map[".*ffw_linear/kernel"] = ("model", "batch")
    return _model_parallel(layout_map)


def _model_parallel(layout_map):
    """`ModelParallel` that repairs layouts that do not divide, where the
    build has the option (upstream 3.15.1 does not)."""
    parameters = inspect.signature(keras.distribution.ModelParallel).parameters
    if "repair_layouts" in parameters:
        return keras.distribution.ModelParallel(
            layout_map=layout_map, repair_layouts=True
        )
    return keras.distribution.ModelParallel(layout_map=layout_map)


def embedding_model(args):
    return keras.Sequential(
        [
            keras.Input((SEQUENCE,), dtype="int32"),
            keras.layers.Embedding(
                embedding_rows(args.size), EMBED_DIM, name="embedding"
            ),
        ],
        name="embedding_model",
    )


def quantize_model(args):
    # A `Dense` kernel of (4096, width) and an `EinsumDense` kernel of
    # (width, 1024), SIZE MiB of float32 in all: (4096, 16384) and
    # (16384, 1024) at SIZE=320.
    width = args.size * 2**20 // (4 * (4096 + 1024)) // 64 * 64
    inputs = keras.Input((4096,))
    x = keras.layers.Dense(width, use_bias=False, name="dense")(inputs)
    outputs = keras.layers.EinsumDense("ab,bc->ac", 1024, name="einsum_dense")(
        x
    )
    return keras.Model(inputs, outputs, name="quantize_model")


def lora_dense_model(args):
    # One Dense kernel of (EMBED_DIM, units), SIZE MiB of float32.
    units = args.size * 2**20 // (EMBED_DIM * 4)
    return keras.Sequential(
        [keras.Input((EMBED_DIM,)), keras.layers.Dense(units, name="dense")],
        name="lora_model",
    )


def kernels_model(args):
    # 12 kernels of (7000, 1024), each below upstream's jit threshold.
    inputs = keras.Input((7000,))
    outputs = [
        keras.layers.Dense(1024, name=f"dense_{i}")(inputs) for i in range(12)
    ]
    return keras.Model(inputs, outputs, name="kernels_model")


def blocks_model(args):
    # 24 blocks of (4096, 4096) kernels, each above upstream's jit threshold.
    return keras.Sequential(
        [keras.Input((4096,))]
        + [keras.layers.Dense(4096, name=f"dense_{i}") for i in range(24)],
        name="blocks_model",
    )


def decoder_model(args):
    layers = keras.layers
    tokens = keras.Input((SEQUENCE,), dtype="int32")
    x = layers.Embedding(VOCAB, HIDDEN, name="token_embedding")(tokens)
    head_dim = HIDDEN // HEADS
    for i in range(args.blocks):
        name = f"decoder_block_{i}"
        h = layers.LayerNormalization(name=f"{name}_pre_attention_norm")(x)
        qkv = [
            layers.EinsumDense(
                "btd,dnh->btnh",
                (SEQUENCE, HEADS, head_dim),
                name=f"{name}_attention_{part}",
            )(h)
            for part in ("query", "key", "value")
        ]
        h = layers.Add()(qkv)
        h = layers.EinsumDense(
            "btnh,nhd->btd", (SEQUENCE, HIDDEN), name=f"{name}_attention_output"
        )(h)
        x = layers.Add()([x, h])
        x = gated_feed_forward(
            x,
            FFW,
            f"{name}_pre_ffw_norm",
            (
                f"{name}_ffw_gating",
                f"{name}_ffw_gating_2",
                f"{name}_ffw_linear",
            ),
        )
    return keras.Model(tokens, x, name="decoder_model")


def gated_feed_forward(x, ffw, norm_name, dense_names):
    """A residual, normalized, gated feed-forward block of width `ffw`;
    `dense_names`: the gate, up and down projections."""
    layers = keras.layers
    gate_name, up_name, down_name = dense_names
    h = layers.LayerNormalization(name=norm_name)(x)
    gate = layers.Dense(ffw, name=gate_name)(h)
    up = layers.Dense(ffw, name=up_name)(h)
    h = layers.Dense(x.shape[-1], name=down_name)(layers.Multiply()([gate, up]))
    return layers.Add()([x, h])


# Qwen2.5-7B's head counts and head size, a quarter of its other widths.
QWEN_HIDDEN = 896
QWEN_HEADS = 28
QWEN_KV_HEADS = 4
QWEN_HEAD_DIM = 128
QWEN_FFW = 4736
QWEN_BLOCKS = 4


def qwen_model(args):
    layers = keras.layers
    tokens = keras.Input((SEQUENCE,), dtype="int32")
    x = layers.Embedding(VOCAB, QWEN_HIDDEN, name="token_embedding")(tokens)
    group = QWEN_HEADS // QWEN_KV_HEADS
    for i in range(QWEN_BLOCKS):
        name = f"transformer_layer_{i}"
        h = layers.LayerNormalization(name=f"{name}_attention_norm")(x)
        q, k, v = [
            layers.EinsumDense(
                "btd,dnh->btnh",
                (SEQUENCE, heads, QWEN_HEAD_DIM),
                name=f"{name}_{part}",
            )(h)
            for part, heads in (
                ("query", QWEN_HEADS),
                ("key", QWEN_KV_HEADS),
                ("value", QWEN_KV_HEADS),
            )
        ]
        # Not attention: enough to use every kernel with its real shape.
        q = layers.Reshape((SEQUENCE, QWEN_KV_HEADS, group, QWEN_HEAD_DIM))(q)
        kv = layers.Reshape((SEQUENCE, QWEN_KV_HEADS, 1, QWEN_HEAD_DIM))(
            layers.Multiply()([k, v])
        )
        h = layers.Multiply()([q, kv])
        h = layers.Reshape((SEQUENCE, QWEN_HEADS, QWEN_HEAD_DIM))(h)
        h = layers.EinsumDense(
            "btnh,nhd->btd",
            (SEQUENCE, QWEN_HIDDEN),
            name=f"{name}_attention_output",
        )(h)
        x = layers.Add()([x, h])
        x = gated_feed_forward(
            x,
            QWEN_FFW,
            f"{name}_ffw_norm",
            (
                f"{name}_ffw_gate",
                f"{name}_ffw_intermediate",
                f"{name}_ffw_output",
            ),
        )
    return keras.Model(tokens, x, name="qwen_model")


# keras-hub `LlamaBackbone`s loaded with `from_preset`: with Llama-3-8B's
# head counts at narrow widths (698 MiB: the untied output embedding is
# replicated on every device, as keras-hub's layout map leaves it), from a
# Keras preset and from a Hugging Face directory; and Llama-3.2-3B at full
# size in bfloat16 (6.4 GB, opt-in).
LLAMA_8B_NARROW = dict(
    vocabulary_size=VOCAB,
    num_layers=8,
    num_query_heads=32,
    num_key_value_heads=8,
    hidden_dim=1024,
    intermediate_dim=3584,
)
LLAMA_3B = dict(configs.LLAMA_3B, dtype="bfloat16")
# Gemma-7B's proportions (as many query as key-value heads, the embedding
# tied) at narrow widths: 334 MiB in bfloat16.
GEMMA_7B_NARROW = dict(
    vocabulary_size=VOCAB,
    num_layers=8,
    num_query_heads=16,
    num_key_value_heads=16,
    hidden_dim=1024,
    head_dim=64,
    intermediate_dim=8192,
)
# family: (backbone arguments, preset kind)
KERAS_HUB = {
    "llama_preset": (LLAMA_8B_NARROW, "keras"),
    "llama_bf16": (dict(LLAMA_8B_NARROW, dtype="bfloat16"), "keras"),
    "llama_hf": (LLAMA_8B_NARROW, "hf"),
    "llama_hf_bf16": (dict(LLAMA_8B_NARROW, dtype="bfloat16"), "hf"),
    "llama_3b": (LLAMA_3B, "keras"),
    "gemma_hf_bf16": (dict(GEMMA_7B_NARROW, dtype="bfloat16"), "hf"),
}


def write_keras_hub_preset(family, path):
    import keras_hub

    arguments, kind = KERAS_HUB[family]
    if kind == "hf":
        config = hf_checkpoint.hf_config(
            "gemma" if family.startswith("gemma") else "llama",
            arguments["vocabulary_size"],
            arguments["num_layers"],
            arguments,
        )
        hf_checkpoint.write(
            path, config, dtype=arguments.get("dtype", "float32")
        )
        return
    keras_hub.models.LlamaBackbone(**arguments).save_to_preset(str(path))


def _from_preset(args, state):
    import keras_hub

    tree = args.keras_hub_tree
    if tree and not keras_hub.__file__.startswith(str(Path(tree).resolve())):
        raise RuntimeError(
            f"keras_hub came from {keras_hub.__file__}, not from {tree}"
        )

    path = str(Path(args.data) / args.family)
    defer = getattr(keras.utils, "defer_initialization", None)
    if not args.scenario.startswith("deferred_") or defer is None:
        # Upstream has no deferred scope: there both are the same.
        defer = contextlib.nullcontext
    arguments = KERAS_HUB[args.family][0]
    kwargs = {}
    if "dtype" in arguments:
        # Without it keras-hub casts a bfloat16 preset to float32.
        kwargs["dtype"] = arguments["dtype"]
    if arguments.get("tie_word_embeddings"):
        # keras-hub 0.32.0's `LlamaBackbone.get_config()` leaves it out: a
        # tied backbone comes back untied, and its weights do not load.
        kwargs["tie_word_embeddings"] = True
    with defer():
        state["model"] = keras_hub.models.Backbone.from_preset(path, **kwargs)


def _int8_from_preset(args, state):
    """A bfloat16 keras-hub preset as an int8 model. The fork builds it in
    `defer_initialization()` and quantizes it there, so that each layer is
    quantized as its weights load; upstream, which has no such scope, and
    `load_then_quantize_*` load the preset, then quantize."""
    import keras_hub

    path = Path(args.data) / args.family
    defer = getattr(keras.utils, "defer_initialization", None)
    with warnings.catch_warnings():
        # Layers without `quantize()` (norms, dropout) warn.
        warnings.simplefilter("ignore")
        if args.scenario.startswith("quantized_load") and defer:
            with defer():
                model = keras_hub.models.Backbone.from_preset(
                    str(path), load_weights=False, dtype="bfloat16"
                )
                model.quantize("int8")
            model.load_weights(path / "model.weights.h5")
        else:
            model = keras_hub.models.Backbone.from_preset(
                str(path), dtype="bfloat16"
            )
            model.quantize("int8")
    state["model"] = model


def _int8_from_hf(args, state):
    """A bfloat16 Hugging Face Llama or Gemma, or Keras preset, as int8.
    With the fork and `patches-hub/`, `from_preset(...,
    dtype="int8_from_bfloat16")` quantizes each layer as its float weights
    are assigned; on upstream, where that raises as on keras-hub 0.32.0,
    load in bfloat16, then quantize."""
    import keras_hub

    path = str(Path(args.data) / args.family)
    with warnings.catch_warnings():
        # Layers without `quantize()` (norms, dropout) warn.
        warnings.simplefilter("ignore")
        if getattr(keras.utils, "defer_initialization", None):
            model = keras_hub.models.Backbone.from_preset(
                path, dtype="int8_from_bfloat16"
            )
        else:
            model = keras_hub.models.Backbone.from_preset(
                path, dtype="bfloat16"
            )
            model.quantize("int8")
    state["model"] = model


BUILDERS = {
    "embedding": embedding_model,
    "embedding_rows": embedding_model,
    "lora_dense": lora_dense_model,
    "quantize": quantize_model,
    "kernels": kernels_model,
    "blocks": blocks_model,
    "decoder": decoder_model,
    "qwen": qwen_model,
}


def save_orbax(model, path, weights_only=True):
    from keras.src.callbacks.orbax_checkpoint import OrbaxCheckpoint

    # Orbax does not overwrite a step: a data directory written again
    # replaces it.
    shutil.rmtree(path, ignore_errors=True)
    # The Orbax state tree includes the optimizer's variables.
    model.compile(optimizer="sgd")
    callback = OrbaxCheckpoint(
        str(path), save_weights_only=weights_only, save_on_background=False
    )
    callback.set_model(model)
    # The callback saves from `fit`; call its save step directly (private).
    callback._save_checkpoint(0)
    callback.wait_until_finished()


def _save_weights(model, path):
    model.save_weights(path)


def _save_sharded(model, path):
    # About four shard files; a variable is never split across files.
    sizes = [w.numpy().nbytes / 1e9 for w in model.weights]
    model.save_weights(
        path, max_shard_size=max(sum(sizes) / 4, max(sizes)) * 1.01
    )


def _save_model(model, path):
    model.save(path)


def _save_orbax_model(model, path):
    # `load_model()` of an Orbax checkpoint matches variables by path, and
    # a `Sequential` rebuilt from its config names them without its own
    # name (3.15.1): the archive holds the same embeddings in a functional
    # model.
    inputs = keras.Input((SEQUENCE,), dtype="int32")
    layer = keras.layers.Embedding(*model.weights[0].shape, name="embedding")
    functional = keras.Model(inputs, layer(inputs))
    layer.set_weights(model.get_weights())
    save_orbax(functional, path, weights_only=False)


# The checkpoints that `prepare` writes, besides the keras-hub presets
# (named after their family): {name: (model family, writer)}, in the order
# they are written (the Orbax writers compile the model).
CHECKPOINTS = {
    "embedding.weights.h5": ("embedding", _save_weights),
    "embedding_sharded.weights.json": ("embedding", _save_sharded),
    "embedding.keras": ("embedding", _save_model),
    "embedding_orbax": ("embedding", save_orbax),
    "embedding_orbax_model": ("embedding", _save_orbax_model),
    "decoder.weights.h5": ("decoder", _save_weights),
    "decoder_sharded.weights.json": ("decoder", _save_sharded),
    "qwen.weights.h5": ("qwen", _save_weights),
    "lora_dense.weights.h5": ("lora_dense", _save_weights),
}


def prepare(args):
    """Writes the checkpoints that the scenarios `args.scenarios` read and
    that are not written yet: each gets a `NAME.complete` marker once
    written, so that a smaller selection writes less and a larger one only
    adds what it lacks."""
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    names = {SCENARIOS[name][3] for name in args.scenarios.split(",")}
    todo = [
        name
        for name in (*CHECKPOINTS, *KERAS_HUB)
        if name in names and not (data / f"{name}.complete").exists()
    ]
    families = {}
    for name in todo:
        family = CHECKPOINTS[name][0] if name in CHECKPOINTS else name
        families.setdefault(family, []).append(name)
    for family, family_names in families.items():
        keras.utils.set_random_seed(0)
        if family in KERAS_HUB:
            write_keras_hub_preset(family, data / family)
            (data / f"{family}.complete").write_text("")
            continue
        # Saved without LoRA (`lora_dense`): the scenario enables it.
        model = BUILDERS[family](args)
        for name in family_names:
            CHECKPOINTS[name][1](model, data / name)
            (data / f"{name}.complete").write_text("")
        del model
        keras.backend.clear_session()


# Each scenario: (model family, what runs before the measured section,
# the measured section, the checkpoint it reads). `setup` returns the state
# the section needs. The checkpoint is a path relative to the data
# directory (a file, a sharded `.weights.json` or a directory), or None;
# the runner reads its bytes once, plainly, for the floor of its time.
def _build(args, family):
    return {"model": BUILDERS[family](args)}


def _build_lora(args, family):
    state = _build(args, family)
    state["model"].get_layer("dense").enable_lora(8)
    return state


def _build_compiled(args, family):
    state = _build(args, family)
    state["model"].compile(optimizer="sgd")
    return state


def _load(path_name):
    def section(args, state):
        state["model"].load_weights(Path(args.data) / path_name)

    return section


def _quantize_int8(args, state):
    state["model"].quantize("int8")


def _quantize_int4(args, state):
    state["model"].quantize("int4")


def _set_weights(args, state):
    state["model"].set_weights(state["values"])


def _assign(args, state):
    state["model"].weights[0].assign(state["values"][0])


def _load_model(args, state):
    state["model"] = keras.saving.load_model(
        Path(args.data) / "embedding.keras"
    )


def _build_then_load(args, state):
    state["model"] = BUILDERS[args.family](args)
    state["model"].load_weights(Path(args.data) / f"{args.family}.weights.h5")


def _deferred_build_then_load(args, state):
    # Upstream has no way to skip the initialization: there this is the
    # same as `build_then_load`.
    defer = getattr(keras.utils, "defer_initialization", None)
    with defer() if defer else contextlib.nullcontext():
        state["model"] = BUILDERS[args.family](args)
    state["model"].load_weights(Path(args.data) / f"{args.family}.weights.h5")


def _deferred_scope(args):
    """`keras.utils.defer_initialization()` for a scenario named
    `deferred_*` on the fork; upstream has no such scope: there both
    scenarios are the same."""
    defer = getattr(keras.utils, "defer_initialization", None)
    if not args.scenario.startswith("deferred_") or defer is None:
        return contextlib.nullcontext()
    return defer()


def _orbax_build_then_load(args, state):
    # Compiled, as a model that resumes training is; 3.15.1 needs it.
    with _deferred_scope(args):
        state["model"] = BUILDERS[args.family](args)
        state["model"].compile(optimizer="sgd")
    state["model"].load_weights(Path(args.data) / "embedding_orbax")


def _orbax_load_model(args, state):
    with _deferred_scope(args):
        state["model"] = keras.saving.load_model(
            Path(args.data) / "embedding_orbax_model"
        )


def _build_to_save(args, family):
    """Builds the model and empties the folder the save scenarios write."""
    shutil.rmtree(Path(args.data) / "saved", ignore_errors=True)
    (Path(args.data) / "saved").mkdir()
    return _build(args, family)


def _build_lora_to_save(args, family):
    state = _build_to_save(args, family)
    layer = state["model"].get_layer("dense")
    layer.enable_lora(8)
    # A trained LoRA update: the merged kernel differs from the kernel.
    layer.lora_kernel_b.assign(np.full(layer.lora_kernel_b.shape, 0.01))
    return state


def _save(path_name, sharded=False):
    """Saves to `path_name` in the data directory's `saved` folder, with
    `save_weights` (`.weights.h5`; sharded: `.weights.json`, one file per
    variable) or `model.save` (`.keras`)."""

    def section(args, state):
        path = Path(args.data) / "saved" / path_name
        if path_name.endswith(".keras"):
            state["model"].save(path)
        elif sharded:
            # Just above the embedding, in GB.
            max_shard_size = (args.size + 1) / 1024
            state["model"].save_weights(path, max_shard_size=max_shard_size)
        else:
            state["model"].save_weights(path)

    return section


def _with_values(args, family):
    state = _build(args, family)
    model = state["model"]
    # `get_weights` order is the order `set_weights` expects.
    state["values"] = [np.array(w) for w in model.get_weights()]
    for value in state["values"]:
        value += 1.0
    return state


def _read_new_memory(args, state):
    # The floor's read, into memory allocated here as a load's new arrays
    # are: what the new memory adds to a load's time.
    path = Path(args.data) / "embedding.weights.h5"
    size = path.stat().st_size
    # Kept to the end of the run, so that its release is not timed.
    state["buffer"] = np.empty(size, np.uint8)
    read_into([path], [size], memoryview(state["buffer"]))


def _with_replacement(args, family):
    """Builds the model and a second value of its first weight, in the
    same sharding."""
    state = _build(args, family)
    state["replacement"] = jnp.copy(state["model"].weights[0].value)
    jax.block_until_ready(state["replacement"])
    return state


def _replace_value(args, state):
    # How a load into a built model ends: the variable takes its new value
    # and its initial value is released.
    state["model"].weights[0].assign(state.pop("replacement"))


SCENARIOS = {
    "build_embedding": ("embedding", None, None, None),
    "build_kernels": ("kernels", None, None, None),
    "build_decoder": ("decoder", None, None, None),
    "build_blocks": ("blocks", None, None, None),
    "build_blocks_unsharded": ("blocks", None, None, None),
    "load_h5_embedding": (
        "embedding",
        _build,
        _load("embedding.weights.h5"),
        "embedding.weights.h5",
    ),
    "load_h5_embedding_rows": (
        "embedding_rows",
        _build,
        _load("embedding.weights.h5"),
        "embedding.weights.h5",
    ),
    "load_h5_decoder": (
        "decoder",
        _build,
        _load("decoder.weights.h5"),
        "decoder.weights.h5",
    ),
    "load_sharded_h5_embedding": (
        "embedding",
        _build,
        _load("embedding_sharded.weights.json"),
        "embedding_sharded.weights.json",
    ),
    "load_sharded_h5_decoder": (
        "decoder",
        _build,
        _load("decoder_sharded.weights.json"),
        "decoder_sharded.weights.json",
    ),
    "load_keras_weights_embedding": (
        "embedding",
        _build,
        _load("embedding.keras"),
        "embedding.keras",
    ),
    "load_model_embedding": ("embedding", None, _load_model, "embedding.keras"),
    "load_lora_dense": (
        "lora_dense",
        _build_lora,
        _load("lora_dense.weights.h5"),
        "lora_dense.weights.h5",
    ),
    "save_h5_embedding": (
        "embedding",
        _build_to_save,
        _save("embedding.weights.h5"),
        None,
    ),
    "save_sharded_h5_embedding": (
        "embedding",
        _build_to_save,
        _save("embedding.weights.json", sharded=True),
        None,
    ),
    "save_model_embedding": (
        "embedding",
        _build_to_save,
        _save("embedding.keras"),
        None,
    ),
    "save_lora_dense": (
        "lora_dense",
        _build_lora_to_save,
        _save("lora_dense.weights.h5"),
        None,
    ),
    "set_weights_embedding": ("embedding", _with_values, _set_weights, None),
    "assign_embedding": ("embedding", _with_values, _assign, None),
    "build_then_load_decoder": (
        "decoder",
        None,
        _build_then_load,
        "decoder.weights.h5",
    ),
    "deferred_build_then_load_decoder": (
        "decoder",
        None,
        _deferred_build_then_load,
        "decoder.weights.h5",
    ),
    "build_then_load_qwen": (
        "qwen",
        None,
        _build_then_load,
        "qwen.weights.h5",
    ),
    "deferred_build_then_load_qwen": (
        "qwen",
        None,
        _deferred_build_then_load,
        "qwen.weights.h5",
    ),
    "keras_hub_preset_llama": (
        "llama_preset",
        None,
        _from_preset,
        "llama_preset",
    ),
    "deferred_keras_hub_preset_llama": (
        "llama_preset",
        None,
        _from_preset,
        "llama_preset",
    ),
    "keras_hub_hf_llama": ("llama_hf", None, _from_preset, "llama_hf"),
    # With the keras-hub series (patches-hub/): no scope in the scenario.
    "hub_keras_preset_llama": (
        "llama_preset",
        None,
        _from_preset,
        "llama_preset",
    ),
    "hub_hf_llama": ("llama_hf", None, _from_preset, "llama_hf"),
    "deferred_keras_hub_hf_llama": (
        "llama_hf",
        None,
        _from_preset,
        "llama_hf",
    ),
    "deferred_keras_hub_llama3_2_3b": (
        "llama_3b",
        None,
        _from_preset,
        "llama_3b",
    ),
    "orbax_load_embedding": (
        "embedding",
        _build_compiled,
        _load("embedding_orbax"),
        "embedding_orbax",
    ),
    "orbax_build_then_load_embedding": (
        "embedding",
        None,
        _orbax_build_then_load,
        "embedding_orbax",
    ),
    "deferred_orbax_build_then_load_embedding": (
        "embedding",
        None,
        _orbax_build_then_load,
        "embedding_orbax",
    ),
    "orbax_load_model_embedding": (
        "embedding",
        None,
        _orbax_load_model,
        "embedding_orbax_model",
    ),
    "deferred_orbax_load_model_embedding": (
        "embedding",
        None,
        _orbax_load_model,
        "embedding_orbax_model",
    ),
    "quantize_int8_dense": ("quantize", _build, _quantize_int8, None),
    "quantize_int4_dense": ("quantize", _build, _quantize_int4, None),
    "load_then_quantize_llama": (
        "llama_bf16",
        None,
        _int8_from_preset,
        "llama_bf16",
    ),
    "quantized_load_llama": (
        "llama_bf16",
        None,
        _int8_from_preset,
        "llama_bf16",
    ),
    "hub_hf_llama_int8": (
        "llama_hf_bf16",
        None,
        _int8_from_hf,
        "llama_hf_bf16",
    ),
    "hub_hf_gemma_int8": (
        "gemma_hf_bf16",
        None,
        _int8_from_hf,
        "gemma_hf_bf16",
    ),
    "hub_keras_preset_llama_int8": (
        "llama_bf16",
        None,
        _int8_from_hf,
        "llama_bf16",
    ),
    "read_new_memory_embedding": (
        "embedding",
        _build,
        _read_new_memory,
        "embedding.weights.h5",
    ),
    "replace_value_embedding": (
        "embedding",
        _with_replacement,
        _replace_value,
        None,
    ),
}


def run_scenario(args):
    family, setup, section, reads = SCENARIOS[args.scenario]
    args.family = family
    if section is None:

        def section(args, state):
            state["model"] = BUILDERS[family](args)

    keras.utils.set_random_seed(0)
    if args.scenario.endswith("_unsharded"):
        scope = contextlib.nullcontext()
    else:
        scope = distribution(family).scope()
    try:
        if args.mode == "config":
            return _measure_config(args, scope, reads)
        return _measure(args, scope, setup, section)
    except Exception as e:
        # The runner decides whether a failure is an expected result.
        return {
            "scenario": args.scenario,
            "mode": args.mode,
            "keras_version": keras.__version__,
            "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}",
        }


def _warm(num_bytes):
    """Writes `num_bytes` of memory once and frees them, just before a
    timed section: the section's new arrays get that memory. On this VM,
    memory that the guest has not backed recently can cost more than the
    read itself, differently from run to run (figures in the wall-time
    entry of `benchmarks/README.md`); the floor reads into memory already
    written, too."""
    np.ones(num_bytes, np.uint8)


def _measure(args, scope, setup, section):
    with scope:
        state = setup(args, args.family) if setup else {}
        if "model" in state:
            # JAX dispatches asynchronously: finish building the model before
            # the section, or its initialization is measured as part of it.
            jax.block_until_ready([w.value for w in state["model"].weights])
        _warm(args.warm_bytes)
        result = {"scenario": args.scenario, "mode": args.mode}
        result["keras_version"] = keras.__version__
        result["baseline_bytes"] = memory.device_bytes()
        memory.reset_peak_rss()
        rss_before, _ = memory.rss_bytes()
        calls = []
        written_before = memory.written_bytes()
        start = time.perf_counter()
        if args.mode == "memory":
            sampler = memory.Sampler(interval=0.001)
            with sampler, memory.hooks(sampler), memory.record_jits(calls):
                section(args, state)
                jax.block_until_ready([w.value for w in state["model"].weights])
            result["peak_bytes"] = sampler.peak
            result["num_samples"] = sampler.num_samples
        else:
            section(args, state)
            jax.block_until_ready([w.value for w in state["model"].weights])
        result["wall_s"] = time.perf_counter() - start
        result["written_bytes"] = memory.written_bytes() - written_before
        _, rss_peak = memory.rss_bytes()
        result["rss_increase_bytes"] = rss_peak - rss_before
        result["final_bytes"] = memory.shard_bytes(
            [w.value for w in state["model"].weights]
        )
        result["num_jit_calls"] = len(calls)
        result["xla_temp_bytes"] = memory.xla_temp_bytes(calls)
    return result


def _measure_config(args, scope, reads):
    """Times building the model from the `.keras` archive's config alone,
    as `load_model` does before it loads the weights: in the fork's
    `defer_initialization()` (no random initialization), plainly upstream,
    which has no such scope (with it)."""
    with zipfile.ZipFile(Path(args.data) / reads) as archive:
        config = archive.read("config.json")
    defer = getattr(keras.utils, "defer_initialization", None)
    with scope:
        _warm(args.warm_bytes)
        start = time.perf_counter()
        with defer() if defer else contextlib.nullcontext():
            model = keras.saving.deserialize_keras_object(json.loads(config))
        values = []
        for variable in model.weights:
            try:
                values.append(variable.value)
            except ValueError:
                # The fork's deferred variables have no value to wait for.
                continue
        jax.block_until_ready(values)
        config_s = time.perf_counter() - start
    return {
        "scenario": args.scenario,
        "mode": args.mode,
        "keras_version": keras.__version__,
        "config_s": config_s,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["prepare", "files", *SCENARIOS])
    parser.add_argument("--data", required=True)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument(
        "--mode", choices=("memory", "time", "config"), default="time"
    )
    parser.add_argument("--out")
    parser.add_argument(
        "--keras-hub-tree",
        help="import keras_hub from this tree (the `hub_` scenarios)",
    )
    parser.add_argument(
        "--warm-bytes",
        type=int,
        default=0,
        help="memory to write and free just before the timed section "
        "(see `_warm`)",
    )
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    if args.keras_hub_tree:
        # keras-hub 0.32.0 with patches-hub/, ahead of the installed one,
        # before anything imports keras_hub (`distribution()` does).
        sys.path.insert(0, args.keras_hub_tree)
    if args.scenario == "prepare":
        prepare(args)
        return
    if args.scenario == "files":
        names = args.scenarios.split(",")
        reads = {name: SCENARIOS[name][3] for name in names}
        sys.stdout.write(json.dumps(reads) + "\n")
        return
    result = run_scenario(args)
    text = json.dumps(result, default=int)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
