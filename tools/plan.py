"""Prints the per-device memory plan of full-size keras-hub Llama-3-8B and
Gemma-7B on the devices of the run (8 in `make plan`), in float32 and
bfloat16, without and with Adam, from models built without values. Run
with `make plan`."""

import time

import jax
import keras
import keras_hub

from benchmarks import configs

GIB = 2**30

# Configurations of the `llama3_8b_en` and `gemma_7b_en` presets.
MODELS = {
    "Llama-3-8B": (
        keras_hub.models.LlamaBackbone,
        configs.LLAMA_8B,
    ),
    "Gemma-7B": (
        keras_hub.models.GemmaBackbone,
        configs.GEMMA_7B,
    ),
}


def main():
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (1, len(devices)), ("batch", "model"), devices
    )
    print(f"keras {keras.__version__}, {len(devices)} devices")
    for name, (backbone_class, config) in MODELS.items():
        distribution = keras.distribution.ModelParallel(
            layout_map=backbone_class.get_layout_map(mesh),
            batch_dim_name="batch",
            repair_layouts=True,
        )
        for dtype in ("float32", "bfloat16"):
            start = time.perf_counter()
            with distribution.scope(), keras.utils.defer_initialization():
                backbone = backbone_class(dtype=dtype, **config)
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
            if dtype == "bfloat16":
                plan.summary(max_replicated=3)
            del backbone


if __name__ == "__main__":
    main()
