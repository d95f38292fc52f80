"""Hugging Face directories (`config.json` + `model.safetensors`) written
from NumPy, with the tensor names and shapes that keras-hub's Gemma, Llama
and Qwen2 converters read. Used by the benchmark and the integration tests
to load Hugging Face checkpoints without a network."""

import json
from pathlib import Path

import numpy as np


def hf_config(family, vocabulary_size, num_layers, arguments):
    """The `config.json` of a keras-hub backbone of `family` ("gemma",
    "llama" or "qwen") built with `arguments`."""
    hidden = arguments["hidden_dim"]
    heads = arguments["num_query_heads"]
    config = {
        "vocab_size": vocabulary_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": arguments["num_key_value_heads"],
        "hidden_size": hidden,
        "head_dim": arguments.get("head_dim", hidden // heads),
        "intermediate_size": arguments["intermediate_dim"],
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": arguments.get("tie_word_embeddings", False),
    }
    if family == "gemma":
        # keras-hub's `intermediate_dim` is twice HF's `intermediate_size`.
        config["intermediate_size"] //= 2
        config.update(model_type="gemma", tie_word_embeddings=True)
    elif family == "llama":
        config.update(model_type="llama")
    else:
        config.update(
            model_type="qwen2", use_sliding_window=False, sliding_window=4096
        )
    return config


def hf_shapes(config):
    """{tensor name: shape} of the checkpoint that `config` describes."""
    hidden = config["hidden_size"]
    head_dim = config["head_dim"]
    queries = config["num_attention_heads"] * head_dim
    keys = config["num_key_value_heads"] * head_dim
    ffw = config["intermediate_size"]
    shapes = {
        "model.embed_tokens.weight": (config["vocab_size"], hidden),
        "model.norm.weight": (hidden,),
    }
    if not config["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (config["vocab_size"], hidden)
    for i in range(config["num_hidden_layers"]):
        layer = f"model.layers.{i}"
        shapes.update(
            {
                f"{layer}.input_layernorm.weight": (hidden,),
                f"{layer}.post_attention_layernorm.weight": (hidden,),
                f"{layer}.self_attn.q_proj.weight": (queries, hidden),
                f"{layer}.self_attn.k_proj.weight": (keys, hidden),
                f"{layer}.self_attn.v_proj.weight": (keys, hidden),
                f"{layer}.self_attn.o_proj.weight": (hidden, queries),
                f"{layer}.mlp.gate_proj.weight": (ffw, hidden),
                f"{layer}.mlp.up_proj.weight": (ffw, hidden),
                f"{layer}.mlp.down_proj.weight": (hidden, ffw),
            }
        )
        if config["model_type"] == "qwen2":
            shapes[f"{layer}.self_attn.q_proj.bias"] = (queries,)
            shapes[f"{layer}.self_attn.k_proj.bias"] = (keys,)
            shapes[f"{layer}.self_attn.v_proj.bias"] = (keys,)
    return shapes


def write(directory, config, seed=0, dtype="float32"):
    """Writes `config.json` and a `model.safetensors` of random tensors of
    `dtype` ("float32" or "bfloat16") into `directory`; returns them."""
    import ml_dtypes
    from safetensors.numpy import save_file

    if dtype == "bfloat16":
        dtype = ml_dtypes.bfloat16
    rng = np.random.default_rng(seed)
    tensors = {
        name: rng.normal(0.0, 0.05, shape).astype(dtype)
        for name, shape in hf_shapes(config).items()
    }
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    save_file(tensors, directory / "model.safetensors")
    return tensors
