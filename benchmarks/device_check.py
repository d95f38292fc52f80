"""The series on one accelerator, in one prepared run (`make device-check`).

Three checks, each in fresh processes, for Keras 3.15.1 and the fork:

1. `load`: a keras-hub `LlamaBackbone` preset written here (Llama-3.2-3B
   in bfloat16 at `--size full`, 6.4 GB), loaded with `from_preset` by
   3.15.1, by the fork and by the fork inside
   `keras.utils.defer_initialization()`: device peak bytes over the
   weights' bytes, and time over two floors measured in the same run
   (reading the weights file; copying as many bytes to the device).
2. `init`: building Llama-3-8B and Gemma-7B (bfloat16) under keras-hub's
   layout map on the run's devices: total time, time in compilation
   (`/jax/core/compile/backend_compile_duration` events), compilations,
   device peak bytes.
3. `tests`: the series' multi-device tests on the run's devices, with the
   harness's "needs more than one device" skip lifted (`one_device.py`), so
   that those whose meshes are sized from `jax.device_count()` run on one.

The device peak is the allocator's own (`memory_stats()`, GPU and TPU);
on CPU, which has none, it is the per-device peak of live arrays
(`memory.Sampler`). `--size tiny` (the default on CPU) runs the same code
on small models in a minute; `make test` runs it that way.

Prints a table and writes one JSON file. Installs nothing from the
network: `--wheels` is a folder of wheels (`make device-wheels`),
installed into a folder of the work directory with `pip --no-index`.

Usage:
  python -m benchmarks.device_check --upstream TREE --fork TREE \
      [--size tiny|full] [--wheels DIR] [--out FILE] [--workdir DIR]
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.configs import GEMMA_7B
from benchmarks.configs import LLAMA_3B
from benchmarks.configs import LLAMA_8B

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30

MODELS = {
    "Llama-3-8B": ("LlamaBackbone", LLAMA_8B),
    "Gemma-7B": ("GemmaBackbone", GEMMA_7B),
}
# The same code on small models: a minute on one CPU device.
TINY = dict(vocabulary_size=512, num_layers=2, hidden_dim=64)
# size: (the preset's backbone, {name: (keras-hub class, config)})
SIZES = {
    "full": (LLAMA_3B, MODELS),
    "tiny": (
        {**LLAMA_3B, **TINY, "intermediate_dim": 128},
        {
            "Llama-3-8B": ("LlamaBackbone", {**LLAMA_8B, **TINY}),
            "Gemma-7B": (
                "GemmaBackbone",
                {**GEMMA_7B, **TINY, "intermediate_dim": 256, "head_dim": 16},
            ),
        },
    ),
}
# The series' test files with multi-device tests; `--size tiny` runs one
# class of them.
TEST_FILES = [
    "keras/src/backend/jax/distribution_lib_test.py",
    "keras/src/backend/jax/core_test.py",
    "keras/src/saving/saving_lib_test.py",
    "keras/src/distribution/memory_plan_test.py",
    "keras/src/initializers/initializer_test.py",
    "keras/src/layers/core/dense_test.py",
]
TINY_TESTS = ["keras/src/layers/core/dense_test.py::LoraMergeInLayoutTest"]
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


# --- In the worker processes: one measurement each, printed as JSON. ---


@contextlib.contextmanager
def device_peak():
    """Yields a dict that gets `peak_bytes` of device 0 once the block ends:
    the allocator's peak above its use at the start where the platform
    reports one (GPU, TPU), else the peak of its live arrays
    (`memory.Sampler`). The sampler runs only where it is needed: it
    samples at every function return and line, which made the loads on a
    TPU four to five times slower."""
    import jax

    from benchmarks import memory

    device = jax.local_devices()[0]
    stats = device.memory_stats() or {}
    result = {"platform": device.platform}
    if "peak_bytes_in_use" in stats:
        yield result
        # The process does nothing else: its peak is this block's.
        result["peak_bytes"] = device.memory_stats()[
            "peak_bytes_in_use"
        ] - stats.get("bytes_in_use", 0)
        result["peak_source"] = "memory_stats"
        return
    sampler = memory.Sampler()
    with sampler, memory.hooks(sampler):
        yield result
    result["peak_bytes"] = sampler.peak[device.id]
    result["peak_source"] = "live arrays"


def weights_bytes(model):
    import jax

    return sum(
        shard.data.nbytes
        for w in model.weights
        for shard in w.value.addressable_shards
        if shard.device == jax.local_devices()[0]
    )


def preset_kwargs(config):
    kwargs = {"dtype": "bfloat16"}
    if config.get("tie_word_embeddings"):
        # keras-hub 0.32.0's `LlamaBackbone.get_config()` leaves it out.
        kwargs["tie_word_embeddings"] = True
    return kwargs


def worker_write(spec):
    import keras_hub

    config = SIZES[spec["size"]][0]
    backbone = keras_hub.models.LlamaBackbone(dtype="bfloat16", **config)
    backbone.save_to_preset(spec["preset"])
    return {"bytes": weights_bytes(backbone)}


def worker_load(spec):
    import jax
    import keras
    import keras_hub

    config = SIZES[spec["size"]][0]
    defer = contextlib.nullcontext
    if spec["deferred"]:
        defer = keras.utils.defer_initialization
    start = time.perf_counter()
    with device_peak() as result, defer():
        backbone = keras_hub.models.Backbone.from_preset(
            spec["preset"], **preset_kwargs(config)
        )
        jax.block_until_ready([w.value for w in backbone.weights])
    result["seconds"] = time.perf_counter() - start
    result["weights_bytes"] = weights_bytes(backbone)
    return result


def worker_floors(spec):
    """Reading the preset's weights files, and copying as many bytes to
    device 0 (a second copy: the first one includes the transfer's setup)."""
    import jax
    import numpy as np

    files = sorted(Path(spec["preset"]).glob("*.weights.h5"))
    num_bytes = 0
    start = time.perf_counter()
    buffer = bytearray(64 * 2**20)
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while read := f.readinto(buffer):
                num_bytes += read
    read_seconds = time.perf_counter() - start
    host = np.ones(num_bytes, np.uint8)
    device = jax.local_devices()[0]
    jax.device_put(host[: 2**20], device).block_until_ready()
    start = time.perf_counter()
    jax.device_put(host, device).block_until_ready()
    return {
        "file_bytes": num_bytes,
        "read_seconds": read_seconds,
        "copy_seconds": time.perf_counter() - start,
    }


def worker_init(spec):
    import jax
    import keras
    import keras_hub

    class_name, config = SIZES[spec["size"]][1][spec["model"]]
    if spec.get("layers"):
        config = {**config, "num_layers": spec["layers"]}
    backbone_class = getattr(keras_hub.models, class_name)
    compiles = []

    def listen(event, duration, **kwargs):
        if event == COMPILE_EVENT:
            compiles.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listen)
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (1, len(devices)), ("batch", "model"), devices
    )
    distribution = keras.distribution.ModelParallel(
        layout_map=backbone_class.get_layout_map(mesh), batch_dim_name="batch"
    )
    start = time.perf_counter()
    with device_peak() as result, distribution.scope():
        backbone = backbone_class(dtype="bfloat16", **config)
        jax.block_until_ready([w.value for w in backbone.weights])
    result.update(
        num_layers=config["num_layers"],
        seconds=time.perf_counter() - start,
        compile_seconds=sum(compiles),
        compilations=len(compiles),
        weights_bytes=weights_bytes(backbone),
    )
    return result


def worker_platform(spec):
    import jax

    return {"platform": jax.local_devices()[0].platform}


WORKERS = {
    "platform": worker_platform,
    "write": worker_write,
    "load": worker_load,
    "floors": worker_floors,
    "init": worker_init,
}


# --- In the main process. ---


def install_wheels(wheels, target):
    """Installs every wheel of `wheels` into `target`, without the network
    and without dependencies; returns `target`, or `None` if no wheels."""
    found = sorted(Path(wheels).glob("*.whl")) if wheels else []
    if not found:
        return None
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index"]
        + ["--no-deps", "--upgrade", "--target", str(target)]
        + [str(w) for w in found],
        check=True,
    )
    return target


def environment(tree, site):
    env = dict(os.environ, KERAS_BACKEND="jax")
    # One device, as the accelerator machine has: no virtual CPU devices.
    flags = env.get("XLA_FLAGS", "").split()
    flags = [f for f in flags if "host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join(flags)
    env.pop("JAX_NUM_CPU_DEVICES", None)
    path = [str(tree), str(ROOT)] + ([str(site)] if site else [])
    # Then what the caller had, such as another keras-hub.
    path += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def run_worker(kind, spec, tree, site, timeout):
    """Runs `kind` in a fresh process on `tree`; returns its result, or
    `{"error": ...}`."""
    if timeout <= 0:
        return {"error": "skipped: the run's budget is spent"}
    command = [sys.executable, "-m", "benchmarks.device_check"]
    command += ["--worker", kind, "--spec", json.dumps(spec)]
    try:
        done = subprocess.run(
            command,
            env=environment(tree, site),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {timeout} s (timeout or budget)"}
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"error": (done.stderr or done.stdout).strip()[-2000:]}
    return json.loads(lines[-1])


def run_tests(tree, site, files, timeout, platform=None):
    """The multi-device tests of `files`, on the run's devices (or those of
    `platform`), with the harness's skip for fewer than 2 devices lifted."""
    if timeout <= 0:
        return {"error": "skipped: the run's budget is spent"}
    env = environment(tree, site)
    if platform:
        env["JAX_PLATFORMS"] = platform
    env["PYTHONPATH"] += os.pathsep + str(ROOT / "benchmarks")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "one_device"]
    command += ["-p", "no:cacheprovider", "-m", "multi_device", *files]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {timeout} s"}
    counts = {}
    for line in done.stdout.splitlines():
        if line.startswith("=") and (" passed" in line or " failed" in line):
            for part in line.strip("= ").split(" in ")[0].split(", "):
                number, _, name = part.partition(" ")
                counts[name] = int(number)
    failed = [
        line.split(" ", 1)[1].split(" - ")[0]
        for line in done.stdout.splitlines()
        if line.startswith("FAILED ")
    ]
    return {
        "seconds": time.perf_counter() - start,
        "counts": counts,
        "failed": failed,
        "returncode": done.returncode,
    }


def ratio(result, key, over):
    if "error" in result or not over:
        return "-"
    return f"{result[key] / over:.2f}x"


def why(result):
    """Why a measurement has no figures: the run's time ran out, or it
    failed (the end of its error output)."""
    error = result["error"]
    if error.startswith(("stopped after", "skipped:")):
        return error
    return f"failed: {error[-200:]}"


def table(results):
    lines = []
    if "load" in results:
        lines += load_table(results)
    if "init" in results:
        lines += init_table(results)
    if "tests" in results:
        lines += tests_table(results)
    return "\n".join(lines)


def load_table(results):
    lines = []
    load, floors = results["load"], results["floors"]
    floor = max(floors.get("read_seconds", 0), floors.get("copy_seconds", 0))
    lines.append(
        f"1. from_preset of a {results['preset_bytes'] / GIB:.2f} GiB preset "
        f"(floors: read {floors.get('read_seconds', 0):.2f} s, copy to "
        f"device {floors.get('copy_seconds', 0):.2f} s)"
    )
    lines.append("   tree               peak/weights  seconds  time/floor")
    for name, result in load.items():
        if "error" in result:
            lines.append(f"   {name:18} {why(result)}")
            continue
        lines.append(
            f"   {name:18} "
            f"{ratio(result, 'peak_bytes', result['weights_bytes']):>12}  "
            f"{result['seconds']:7.2f}  {ratio(result, 'seconds', floor):>10}"
        )
    return lines


def init_table(results):
    lines = []
    lines.append("2. building in keras-hub's layout (bfloat16)")
    lines.append(
        "   model       tree     layers  seconds  compiling  compilations  "
        "peak/weights"
    )
    for key, result in results["init"].items():
        model, tree = key.split(" / ")
        if "error" in result:
            lines.append(f"   {model:11} {tree:8} {why(result)}")
            continue
        lines.append(
            f"   {model:11} {tree:8} {result['num_layers']:6d} "
            f"{result['seconds']:8.2f}  "
            f"{result['compile_seconds']:9.2f}  "
            f"{result['compilations']:12d}  "
            f"{ratio(result, 'peak_bytes', result['weights_bytes']):>12}"
        )
    return lines


def tests_table(results):
    lines = []
    tests = results["tests"]
    counts = ", ".join(f"{n} {k}" for k, n in tests.get("counts", {}).items())
    lines.append(f"3. the series' multi-device tests: {counts or tests}")
    if "failed_only_here" in tests:
        lines.append(
            f"   {len(tests['failed_on_one_cpu_device'] or [])} of the "
            "failures also fail on one CPU device; failing only here:"
        )
        if not tests["failed_only_here"]:
            lines.append("   (none)")
    for test_id in tests.get("failed_only_here", tests.get("failed", [])):
        lines.append(f"   FAILED {test_id}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", choices=sorted(WORKERS))
    parser.add_argument("--spec")
    parser.add_argument("--upstream", type=Path)
    parser.add_argument("--fork", type=Path)
    parser.add_argument("--size", choices=sorted(SIZES))
    parser.add_argument("--wheels", type=Path)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--timeout", type=int, default=150)
    # The whole run: what is left when it ends is reported as skipped.
    parser.add_argument("--budget", type=int, default=480)
    # Fewer layers for the `init` models, for a device whose memory holds
    # less than the whole model (the compilations do not change: every
    # layer has the same shapes).
    parser.add_argument("--init-layers", type=int)
    # Which checks to run, for a machine whose commands are time-limited.
    parser.add_argument("--checks", default="load,init,tests")
    # Which `init` models to build (comma-separated; default all).
    parser.add_argument("--models")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](json.loads(args.spec))))
        return 0
    start = time.perf_counter()

    def left(most):
        return int(min(most, args.budget - (time.perf_counter() - start)))

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="device-check-"))
    site = install_wheels(args.wheels, workdir / "site")
    size = args.size
    if size is None:
        probe = subprocess.run(
            [sys.executable, "-c", "import jax; print(jax.default_backend())"],
            env=environment(args.fork, site),
            capture_output=True,
            text=True,
        )
        size = "tiny" if probe.stdout.strip() in ("cpu", "") else "full"
    checks = set(args.checks.split(","))
    preset = str(workdir / "preset")
    spec = {"size": size, "preset": preset, "layers": args.init_layers}
    results = {"size": size}
    if "load" in checks:
        written = run_worker("write", spec, args.fork, site, left(args.timeout))
        if "error" in written:
            raise SystemExit(f"writing the preset failed: {written['error']}")
        results["preset_bytes"] = written["bytes"]
        results["load"] = {}
        for name, tree, deferred in (
            ("3.15.1", args.upstream, False),
            ("fork", args.fork, False),
            ("fork, deferred", args.fork, True),
        ):
            results["load"][name] = run_worker(
                "load",
                {**spec, "deferred": deferred},
                tree,
                site,
                left(args.timeout),
            )
        results["floors"] = run_worker(
            "floors", spec, args.fork, site, left(60)
        )
    if "init" in checks:
        results["init"] = {}
        models = SIZES[size][1]
        if args.models:
            models = [m for m in models if m in args.models.split(",")]
        for model in models:
            for name, tree in (("3.15.1", args.upstream), ("fork", args.fork)):
                results["init"][f"{model} / {name}"] = run_worker(
                    "init",
                    {**spec, "model": model},
                    tree,
                    site,
                    left(args.timeout),
                )
    if "tests" in checks:
        files = TINY_TESTS if size == "tiny" else TEST_FILES
        tests = run_tests(args.fork, site, files, left(2 * args.timeout))
        results["tests"] = tests
        probe = run_worker("platform", spec, args.fork, site, left(60))
        if probe.get("platform", "cpu") != "cpu":
            # On one CPU device, for the tests that cannot pass on one
            # device (meshes of 2 rows, layouts that must shard).
            cpu = run_tests(
                args.fork, site, files, left(2 * args.timeout), "cpu"
            )
            tests["failed_on_one_cpu_device"] = cpu.get("failed")
            tests["failed_only_here"] = sorted(
                set(tests.get("failed", [])) - set(cpu.get("failed", []))
            )
    results["seconds"] = time.perf_counter() - start
    print(table(results))
    print(f"total {results['seconds']:.0f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
