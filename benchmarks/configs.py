"""Configurations of full-size keras-hub backbones, shared by the
benchmark, the device check and `make plan` (no imports, so that any of
them can read these before choosing a Keras tree)."""

# `llama3.2_3b_en`, in bfloat16: 6.4 GB.
LLAMA_3B = dict(
    vocabulary_size=128256,
    num_layers=28,
    num_query_heads=24,
    num_key_value_heads=8,
    hidden_dim=3072,
    intermediate_dim=8192,
    tie_word_embeddings=True,
    rope_max_wavelength=500000,
)
# `llama3_8b_en`.
LLAMA_8B = dict(
    vocabulary_size=128256,
    num_layers=32,
    num_query_heads=32,
    hidden_dim=4096,
    intermediate_dim=14336,
    num_key_value_heads=8,
    rope_max_wavelength=500000,
    layer_norm_epsilon=1e-5,
)
# Llama-3-70B: `llama3_8b_en`'s vocabulary and rope, 70.6 B parameters.
LLAMA_70B = dict(
    LLAMA_8B,
    num_layers=80,
    num_query_heads=64,
    hidden_dim=8192,
    intermediate_dim=28672,
)
# `gemma_7b_en`.
GEMMA_7B = dict(
    vocabulary_size=256000,
    num_layers=28,
    num_query_heads=16,
    num_key_value_heads=16,
    hidden_dim=3072,
    intermediate_dim=49152,
    head_dim=256,
)
