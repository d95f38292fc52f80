"""Runs the README's Python blocks, as a user copies them, on 8 CPU devices.

The blocks run in order in one namespace. Each is made small with the
replacements below (a local preset instead of a hub name, narrow widths),
and every replacement must find its text, so that a README edit that the
test no longer covers fails here instead of rotting.
"""

import contextlib
import os
import re

import jax
import keras
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tools.common import ROOT

keras_hub = pytest.importorskip("keras_hub")
# Skips as well without safetensors or sentencepiece.
presets = pytest.importorskip("integration_tests.test_keras_hub_presets")

# (text in the README, text the test runs), per block in README order.
REPLACEMENTS = [
    [('"llama3_8b_en"', "PRESET")],
    [('"./llama3_8b_en"', "PRESET")],
    [
        ("Embedding(128256, 4096", "Embedding(512, 64"),
        ("Dense(14336", "Dense(256"),
        ("Dense(4096", "Dense(64"),
    ],
]


def python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```$", text, re.M | re.S)


def make_small(block, replacements):
    for old, new in replacements:
        if old not in block:
            raise AssertionError(f"the README block no longer has {old!r}")
        block = block.replace(old, new)
    return block


def save_preset(path):
    """A `LlamaCausalLM` task preset: Llama-3-8B's head counts, 2 layers of
    width 128, a SentencePiece tokenizer trained here."""
    keras.utils.set_random_seed(1)
    # 32 pieces, which 8 and 16 devices divide, so that keras-hub's layout
    # map shards the embeddings.
    words = " ".join(f"w{i}" for i in range(32))
    proto = presets.sentencepiece_proto(
        [words, "what is keras"] * 10, vocab_size=32
    )
    tokenizer = keras_hub.models.LlamaTokenizer(proto=proto)
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=tokenizer.vocabulary_size(),
        num_layers=2,
        **presets.FAMILIES["llama"][1],
    )
    preprocessor = keras_hub.models.LlamaCausalLMPreprocessor(
        tokenizer, sequence_length=16
    )
    keras_hub.models.LlamaCausalLM(
        backbone=backbone, preprocessor=preprocessor
    ).save_to_preset(path)
    return {w.path: np.asarray(w.numpy()) for w in backbone.weights}


@contextlib.contextmanager
def working_directory(path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def test_readme_python_blocks_run(tmp_path):
    blocks = python_blocks((ROOT / "README.md").read_text())
    assert len(blocks) == len(REPLACEMENTS), "README blocks changed"
    blocks = [make_small(b, r) for b, r in zip(blocks, REPLACEMENTS)]
    saved = save_preset(tmp_path / "preset")
    namespace = {"PRESET": str(tmp_path / "preset"), "__name__": "readme"}

    # keras-hub: the task loads in the deferred scope and generates.
    exec(compile(blocks[0], "README.md[0]", "exec"), namespace)
    assert isinstance(namespace["causal_lm"], keras_hub.models.CausalLM)
    for weight in namespace["causal_lm"].backbone.weights:
        # Saved in float32, loaded in bfloat16.
        expected = saved[weight.path].astype(weight.value.dtype)
        np.testing.assert_array_equal(weight.numpy(), expected)

    # The same preset, loaded as int8.
    exec(compile(blocks[1], "README.md[1]", "exec"), namespace)
    dtypes = {w.dtype for w in namespace["backbone"].weights}
    assert "int8" in dtypes

    # A plain Keras model: the test writes the checkpoint the block loads,
    # from the block's own `build_model()`.
    head, marker, tail = blocks[2].partition("with distribution.scope()")
    assert marker, "the plain Keras block has no distribution scope"
    with working_directory(tmp_path):
        exec(compile(head, "README.md[2]", "exec"), namespace)
        with namespace["distribution"].scope():
            source = namespace["build_model"]()
        source.save_weights("model.weights.h5")
        exec(compile(marker + tail, "README.md[2]", "exec"), namespace)
    model = namespace["model"]
    for weight, expected in zip(model.weights, source.weights):
        np.testing.assert_array_equal(weight.numpy(), expected.numpy())
    for name in ("token_embedding", "dense_up", "dense_down"):
        value = model.get_layer(name).weights[0].value
        assert value.sharding.spec == P(None, "model"), name
        assert len(value.addressable_shards) == jax.device_count()
