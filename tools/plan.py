"""Prints the per-device memory plan of full-size keras-hub Llama-3-8B and
Gemma-7B (float32 and bfloat16) and Llama-3-70B (bfloat16 and int8) on
the devices of the run (8 in `make plan`), without and with Adam, from
models built without values. Run with `make plan`."""

import time

import jax
import keras
import keras_hub

from benchmarks import configs

GIB = 2**30

# Configurations of the `llama3_8b_en` and `gemma_7b_en` presets, and
# Llama-3-70B; the dtypes planned for each.
MODELS = {
    "Llama-3-8B": (
        keras_hub.models.LlamaBackbone,
        configs.LLAMA_8B,
        ("float32", "bfloat16"),
    ),
    "Gemma-7B": (
        keras_hub.models.GemmaBackbone,
        configs.GEMMA_7B,
        ("float32", "bfloat16"),
    ),
    "Llama-3-70B": (
        keras_hub.models.LlamaBackbone,
        configs.LLAMA_70B,
        ("bfloat16", "int8"),
    ),
}


def int8_policy():
    """The dtype of a Llama quantized to int8 as `quantize("int8")` does
    it: its projections, feedforward and embeddings in int8 with bfloat16
    scales, the rest bfloat16. A quantized policy for the whole backbone
    would quantize its layers twice in keras-hub 0.32.0."""
    policy = keras.dtype_policies.DTypePolicyMap(default_policy="bfloat16")
    int8 = keras.dtype_policies.get("int8_from_bfloat16")
    policy[".*(query|key|value|attention_output|feedforward_.*_dense)"] = int8
    policy["token_embedding"] = int8
    return policy


def main():
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (1, len(devices)), ("batch", "model"), devices
    )
    print(f"keras {keras.__version__}, {len(devices)} devices")
    for name, (backbone_class, config, dtypes) in MODELS.items():
        distribution = keras.distribution.ModelParallel(
            layout_map=backbone_class.get_layout_map(mesh),
            batch_dim_name="batch",
            repair_layouts=True,
        )
        for dtype in dtypes:
            policy = int8_policy() if dtype == "int8" else dtype
            start = time.perf_counter()
            with distribution.scope(), keras.utils.defer_initialization():
                backbone = backbone_class(dtype=policy, **config)
                built = time.perf_counter()
                plan = keras.distribution.plan_memory(
                    backbone, optimizer="adam"
                )
            planned = time.perf_counter()
            variables = max(plan.variable_bytes.values())
            adam = max(plan.optimizer_bytes.values())
            print(
                f"\n{name} {dtype}: {backbone.count_params():,} parameters, "
                f"built in {built - start:.2f} s, planned (with Adam) in "
                f"{planned - built:.2f} s, live device arrays: "
                f"{len(jax.live_arrays())}"
            )
            print(
                f"  busiest device: {variables / GIB:.2f} GiB of variables, "
                f"{(variables + adam) / GIB:.2f} GiB with Adam's slots"
            )
            if dtype != "float32":
                plan.summary(max_replicated=3)
            del backbone


if __name__ == "__main__":
    main()
