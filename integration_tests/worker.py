"""One process of a multi-process scenario; `multiprocess.py` starts them.

Usage (the launcher calls it, one process per JAX process):
  python -m integration_tests.worker SCENARIO --process-id I
      --num-processes N --coordinator HOST:PORT --workdir DIR
      [--size MIB] [--seed S]

Every process builds the same model under a `ModelParallel` layout over the
global mesh of all processes' devices, runs the scenario and writes what it
measured to DIR/SCENARIO-I.json. A scenario that raises writes the error
there and exits with status 1.

Scenarios:
  reference  (one process) build with --seed, save model.weights.h5 and
             reference.npz with the full values, and a bad-shape checkpoint
  build      build with --seed; compare the local shards with reference.npz
  load       build with another seed, `load_weights(model.weights.h5)`
  assign     `set_weights` then `assign` from the reference NumPy values
  save       load, then `save_weights` to saved.weights.h5 and read it back;
             the same to sharded files, sent in small rounds, and load them
  save_model load, then `model.save()` to saved.keras and load it back
  save_fails save to a missing folder: every process must raise
  bad_shape  like `load`, but process 1 reads a checkpoint of another shape
  deferred_load  build in `keras.utils.defer_initialization()`, then load
  repaired   a layout that the mesh does not divide: save, then deferred load
  orbax      train a step with `OrbaxCheckpoint`, then restore it into a
             deferred model
  hub_hf     keras-hub `from_preset` of a Hugging Face Llama directory,
             with no scope in user code, from storage (not the page cache),
             watched by the sampler
  hang       never returns (tests the launcher's deadline)
"""

import argparse
import contextlib
import gc
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from unittest import mock

os.environ.setdefault("KERAS_BACKEND", "jax")

import h5py  # noqa: E402
import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import memory  # noqa: E402
from integration_tests.multiprocess import DENSE_UNITS  # noqa: E402
from integration_tests.multiprocess import EMBED_DIM  # noqa: E402
from integration_tests.multiprocess import rows  # noqa: E402


def model_layout_map():
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (1, len(devices)), axis_names=("batch", "model"), devices=devices
    )
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*embedding/embeddings"] = (None, "model")
    layout_map[".*dense/kernel"] = ("model", None)
    return layout_map


def build_model(size_mib, embed_dim=EMBED_DIM, deferred=False, name=None):
    layout_map = model_layout_map()
    defer = keras.utils.defer_initialization if deferred else None
    with (
        keras.distribution.ModelParallel(layout_map=layout_map).scope(),
        defer() if defer else contextlib.nullcontext(),
    ):
        model = keras.Sequential(
            [
                keras.Input((8,), dtype="int32"),
                keras.layers.Embedding(
                    rows(size_mib), embed_dim, name="embedding"
                ),
                keras.layers.Dense(DENSE_UNITS, name="dense"),
            ],
            name=name,
        )
    if not deferred:
        jax.block_until_ready([w.value for w in model.weights])
    return model


def io_counter(key):
    """A counter of this process from /proc/self/io: `rchar`, the bytes it
    has read through system calls, `read_bytes`, the bytes it has read
    from storage (memory-mapped reads too), or `write_bytes`, the bytes it
    has written to storage (sockets not included)."""
    with open("/proc/self/io") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name == key:
                return int(value)
    raise KeyError(key)


def local_shards(model):
    """Bytes of the model's weights that this process's devices hold, and
    the largest per-device total."""
    per_device = memory.shard_bytes(w.value for w in model.weights)
    return sum(per_device.values()), max(per_device.values())


def key(weight):
    """The weight's path without the model's name, which differs between
    models built in the same process."""
    return weight.path.split("/", 1)[1]


def check_values(model, reference):
    """Compares every local shard with the reference; returns the count."""
    checked = 0
    for weight in model.weights:
        expected = reference[key(weight)]
        if weight.value.shape != expected.shape:
            raise AssertionError(
                f"{key(weight)}: shape {weight.value.shape}, expected "
                f"{expected.shape}"
            )
        for shard in weight.value.addressable_shards:
            np.testing.assert_array_equal(
                np.asarray(shard.data), expected[shard.index]
            )
            checked += 1
    return checked


def load_reference(workdir):
    with np.load(workdir / "reference.npz") as data:
        return {name.replace("|", "/"): data[name] for name in data.files}


def measured(function):
    """Runs `function` twice and returns what it cost this process.

    The first run is watched by the per-device sampler of the benchmark.
    The sampler holds the arrays it looks at for a moment, which delays
    their release, so RSS, bytes read and written and time come from the
    second, unwatched run (the first may also write a module's first
    `.pyc`).
    """
    sampler = memory.Sampler()
    with sampler, memory.hooks(sampler):
        function()
    memory.reset_peak_rss()
    rss_before, _ = memory.rss_bytes()
    read_before = io_counter("rchar")
    written_before = io_counter("write_bytes")
    start = time.perf_counter()
    function()
    seconds = time.perf_counter() - start
    _, rss_peak = memory.rss_bytes()
    return {
        "seconds": seconds,
        "bytes_read": io_counter("rchar") - read_before,
        "bytes_written": io_counter("write_bytes") - written_before,
        "rss_increase": rss_peak - rss_before,
        "peak_device_bytes": max(sampler.peak.values()),
    }


def scenario_reference(args):
    model = build_model(args.size)
    model.save_weights(args.workdir / "model.weights.h5")
    values = {key(w).replace("/", "|"): w.numpy() for w in model.weights}
    np.savez(args.workdir / "reference.npz", **values)
    bad = build_model(args.size, embed_dim=EMBED_DIM // 2)
    bad.save_weights(args.workdir / "bad_shape.weights.h5")
    return {}


def scenario_build(args):
    model = build_model(args.size)
    held, largest = local_shards(model)
    return {
        "bytes_held": held,
        "largest_device_bytes": largest,
        "fully_addressable": any(
            w.value.is_fully_addressable for w in model.weights
        ),
        "checked_shards": check_values(model, load_reference(args.workdir)),
    }


def scenario_load(args, path="model.weights.h5"):
    keras.utils.set_random_seed(args.seed + 1)
    model = build_model(args.size)
    result = measured(lambda: model.load_weights(args.workdir / path))
    held, largest = local_shards(model)
    result.update(
        bytes_held=held,
        largest_device_bytes=largest,
        checked_shards=check_values(model, load_reference(args.workdir)),
    )
    return result


def scenario_assign(args):
    keras.utils.set_random_seed(args.seed + 1)
    model = build_model(args.size)
    reference = load_reference(args.workdir)
    values = [reference[key(w)] for w in model.weights]
    result = measured(lambda: model.set_weights(values))
    checked = check_values(model, reference)
    for weight in model.weights:
        weight.assign(np.zeros(weight.shape, weight.dtype))
    for weight, value in zip(model.weights, values):
        weight.assign(value)
    held, largest = local_shards(model)
    result.update(
        checked_shards=checked + check_values(model, reference),
        bytes_held=held,
        largest_device_bytes=largest,
    )
    return result


def scenario_save(args):
    model = build_model(args.size)
    model.load_weights(args.workdir / "model.weights.h5")
    reference = load_reference(args.workdir)
    path = args.workdir / "saved.weights.h5"
    result = measured(lambda: model.save_weights(path))
    result["largest_device_bytes"] = local_shards(model)[1]
    # `save_weights` returns in every process once the file is complete,
    # so each process can read it back.
    checked = 0
    with h5py.File(path, "r") as f:
        for layer in model.layers:
            for i, weight in enumerate(layer.weights):
                np.testing.assert_array_equal(
                    f[f"layers/{layer.name}/vars/{i}"][()],
                    reference[key(weight)],
                )
                checked += 1
    # The same through a sharded save and a load into a fresh model, with
    # the rows gathered in many small blocks rather than the few of a
    # full-size save.
    path = args.workdir / "saved.weights.json"
    from keras.src.backend.jax import distribution_lib

    gather_bytes = distribution_lib._GATHER_BYTES
    distribution_lib._GATHER_BYTES = 64 * 1024
    try:
        # Just above the embeddings: the dense layer goes to a second file.
        model.save_weights(path, max_shard_size=(args.size + 0.1) / 1024)
    finally:
        distribution_lib._GATHER_BYTES = gather_bytes
    other = build_model(args.size)
    other.load_weights(path)
    result["checked_variables"] = checked
    result["checked_shards"] = check_values(other, reference)
    return result


def scenario_save_model(args):
    """Load, then `model.save()` to saved.keras; every process then loads
    the archive in the same layout and compares its shards."""
    model = build_model(args.size)
    model.load_weights(args.workdir / "model.weights.h5")
    path = args.workdir / "saved.keras"
    result = measured(lambda: model.save(path))
    result["largest_device_bytes"] = local_shards(model)[1]
    with keras.distribution.ModelParallel(
        layout_map=model_layout_map()
    ).scope():
        loaded = keras.saving.load_model(path)
    checked = 0
    for weight, expected in zip(loaded.weights, model.weights):
        for shard, other in zip(
            weight.value.addressable_shards,
            expected.value.addressable_shards,
        ):
            np.testing.assert_array_equal(shard.data, other.data)
            checked += 1
    result["checked_shards"] = checked
    return result


def scenario_save_fails(args):
    """`save_weights` and `model.save()` to a folder that does not exist:
    process 0, which writes, fails; every process must raise, none hang."""
    model = build_model(args.size)
    model.load_weights(args.workdir / "model.weights.h5")
    path = args.workdir / "missing" / "saved"
    errors = {}
    for name, save in (
        ("save_weights", lambda: model.save_weights(f"{path}.weights.h5")),
        ("save", lambda: model.save(f"{path}.keras")),
    ):
        try:
            save()
        except Exception as e:
            errors[name] = {"type": type(e).__name__, "message": str(e)}
    # Writing fails in process 0 at the second block of the embeddings
    # (gathered in 3 or more): every process raises, and the next save
    # works.
    write = h5py.Dataset.__setitem__
    calls = []

    def failing_write(dataset, index, value):
        calls.append(index)
        if jax.process_index() == 0 and len(calls) == 2:
            raise OSError("No space left on device (injected)")
        return write(dataset, index, value)

    try:
        with mock.patch.object(h5py.Dataset, "__setitem__", failing_write):
            model.save_weights(args.workdir / "failed.weights.h5")
    except Exception as e:
        errors["write"] = {"type": type(e).__name__, "message": str(e)}
    model.save_weights(args.workdir / "after_failure.weights.h5")
    other = build_model(args.size)
    other.load_weights(args.workdir / "after_failure.weights.h5")
    checked = check_values(other, load_reference(args.workdir))
    return {"errors": errors, "checked_after_failure": checked}


def scenario_deferred_load(args):
    """Build in `keras.utils.defer_initialization()`, then load; twice, as
    in `measured()`: watched by the sampler, then bare."""
    path = args.workdir / "model.weights.h5"
    live_before = len(jax.live_arrays())
    model = build_model(args.size, deferred=True)
    result = {"arrays_placed_by_build": len(jax.live_arrays()) - live_before}
    sampler = memory.Sampler()
    with sampler, memory.hooks(sampler):
        model.load_weights(path)
    del model
    model = build_model(args.size, deferred=True)
    memory.reset_peak_rss()
    rss_before, _ = memory.rss_bytes()
    read_before = io_counter("rchar")
    start = time.perf_counter()
    model.load_weights(path)
    seconds = time.perf_counter() - start
    _, rss_peak = memory.rss_bytes()
    held, largest = local_shards(model)
    result.update(
        seconds=seconds,
        bytes_read=io_counter("rchar") - read_before,
        rss_increase=rss_peak - rss_before,
        peak_device_bytes=max(sampler.peak.values()),
        bytes_held=held,
        largest_device_bytes=largest,
        checked_shards=check_values(model, load_reference(args.workdir)),
    )
    return result


def scenario_repaired(args):
    """A kernel of 12 columns sharded by column: 8 global devices do not
    divide it, so its layout is repaired (to rows). Save from the first
    process, then load into a model built in the deferred scope."""
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (1, len(devices)), axis_names=("batch", "model"), devices=devices
    )
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*dense/kernel"] = (None, "model")
    distribution = keras.distribution.ModelParallel(
        layout_map=layout_map, repair_layouts=True
    )

    def build(deferred):
        defer = keras.utils.defer_initialization
        with (
            distribution.scope(),
            defer() if deferred else contextlib.nullcontext(),
        ):
            return keras.Sequential(
                [keras.Input((16,)), keras.layers.Dense(12, name="dense")]
            )

    source = build(deferred=False)
    path = args.workdir / "repaired.weights.h5"
    source.save_weights(path)
    model = build(deferred=True)
    model.load_weights(path)
    checked = 0
    with h5py.File(path, "r") as f:
        for weight, i in zip(model.weights, ("0", "1")):
            expected = f[f"layers/dense/vars/{i}"][()]
            for shard in weight.value.addressable_shards:
                np.testing.assert_array_equal(
                    np.asarray(shard.data), expected[shard.index]
                )
                checked += 1
    kernel = model.weights[0].value
    return {
        "kernel_spec": [str(axis) for axis in kernel.sharding.spec],
        "kernel_shard_shape": kernel.addressable_shards[0].data.shape,
        "checked_shards": checked,
    }


def scenario_bad_shape(args):
    path = "bad_shape.weights.h5" if args.process_id == 1 else None
    return scenario_load(args, path or "model.weights.h5")


def scenario_orbax(args):
    """Train a step with `OrbaxCheckpoint` (each process writes its shards),
    then restore into a model built in `keras.utils.defer_initialization()`
    with `load_weights`, watched by the sampler."""
    from keras.callbacks import OrbaxCheckpoint

    path = args.workdir / "orbax"
    # Orbax matches variables by path: both models get the same name.
    model = build_model(args.size, name="orbax_model")
    model.compile(optimizer="sgd", loss="mse")
    model.fit(
        np.zeros((8, 8), "int32"),
        np.ones((8, 8, DENSE_UNITS)),
        verbose=0,
        callbacks=[OrbaxCheckpoint(str(path), save_on_background=False)],
    )
    # Copies: a NumPy view of a CPU shard would keep it alive.
    trained = {
        key(w): {
            str(s.index): np.array(s.data) for s in w.value.addressable_shards
        }
        for w in model.weights
    }
    del model
    keras.backend.clear_session()
    gc.collect()
    live_before = memory.shard_bytes(jax.live_arrays())
    restored = build_model(args.size, deferred=True, name="orbax_model")
    sampler = memory.Sampler()
    with sampler, memory.hooks(sampler):
        restored.load_weights(path)
    checked = 0
    for weight in restored.weights:
        for shard in weight.value.addressable_shards:
            np.testing.assert_array_equal(
                np.asarray(shard.data), trained[key(weight)][str(shard.index)]
            )
            checked += 1
    held, largest = local_shards(restored)
    return {
        "checked_shards": checked,
        "bytes_held": held,
        "largest_device_bytes": largest,
        "peak_device_bytes": max(sampler.peak.values()),
        "live_before": max(live_before.values(), default=0),
    }


# A Llama with Llama-3-8B's head counts at narrow widths, 2 blocks (366
# MiB in float32), for `scenario_hub_hf`.
HUB_LLAMA = dict(
    vocabulary_size=32000,
    num_layers=2,
    num_query_heads=32,
    num_key_value_heads=8,
    hidden_dim=1024,
    intermediate_dim=3584,
)


def scenario_hub_hf(args):
    """`keras_hub.models.Backbone.from_preset` of a Hugging Face Llama
    directory under keras-hub's Llama layout map, in every process. The
    first process writes it; each then loads its own copy, dropped from
    the page cache, so that `read_bytes` counts what it read from
    storage."""
    import keras_hub
    from jax.experimental import multihost_utils

    from benchmarks import hf_checkpoint

    written = args.workdir / "llama_hf"
    if jax.process_index() == 0 and not written.exists():
        config = hf_checkpoint.hf_config("llama", 32000, 2, HUB_LLAMA)
        hf_checkpoint.write(written, config)
    multihost_utils.sync_global_devices("hub_hf written")
    # Each process reads its own copy, as each host of a pod reads its own
    # storage through its own page cache.
    directory = args.workdir / f"llama_hf-{jax.process_index()}"
    shutil.rmtree(directory, ignore_errors=True)
    shutil.copytree(written, directory)
    weights = directory / "model.safetensors"
    fd = os.open(weights, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(
        (1, len(devices)), axis_names=("batch", "model"), devices=devices
    )
    distribution = keras.distribution.ModelParallel(
        layout_map=keras_hub.models.LlamaBackbone.get_layout_map(mesh),
        batch_dim_name="batch",
    )
    memory.reset_peak_rss()
    rss_before, _ = memory.rss_bytes()
    storage_before = io_counter("read_bytes")
    start = time.perf_counter()
    # The sampler does not read the file: `bytes_read` still counts only
    # what `from_preset` reads.
    sampler = memory.Sampler()
    with sampler, memory.hooks(sampler), distribution.scope():
        model = keras_hub.models.Backbone.from_preset(str(directory))
    seconds = time.perf_counter() - start
    _, rss_peak = memory.rss_bytes()
    held, largest = local_shards(model)
    # The bytes this process's devices need: each distinct slice once (a
    # replicated weight is needed whole), the checkpoint being float32.
    needed = 0
    for weight in model.weights:
        slices = {
            tuple((s.start, s.stop) for s in shard.index): shard.data.nbytes
            for shard in weight.value.addressable_shards
        }
        needed += sum(slices.values())
    return {
        "seconds": seconds,
        "bytes_read": io_counter("read_bytes") - storage_before,
        "needed_bytes": needed,
        "rss_increase": rss_peak - rss_before,
        "bytes_held": held,
        "largest_device_bytes": largest,
        "peak_device_bytes": max(sampler.peak.values()),
        "share_bytes": needed,
        "checkpoint_bytes": weights.stat().st_size,
        "keras_hub": keras_hub.__file__,
    }


def scenario_hang(args):
    """Never returns: for the launcher's deadline."""
    while True:
        time.sleep(1)


SCENARIOS = {
    "reference": scenario_reference,
    "build": scenario_build,
    "load": scenario_load,
    "assign": scenario_assign,
    "save": scenario_save,
    "save_model": scenario_save_model,
    "save_fails": scenario_save_fails,
    "bad_shape": scenario_bad_shape,
    "deferred_load": scenario_deferred_load,
    "repaired": scenario_repaired,
    "orbax": scenario_orbax,
    "hub_hf": scenario_hub_hf,
    "hang": scenario_hang,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--coordinator")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()

    out = args.workdir / f"{args.scenario}-{args.process_id}.json"
    try:
        # The same seed in every process: `initialize` keeps it.
        keras.utils.set_random_seed(args.seed)
        if args.num_processes > 1:
            keras.distribution.initialize(
                job_addresses=args.coordinator,
                num_processes=args.num_processes,
                process_id=args.process_id,
            )
        result = SCENARIOS[args.scenario](args)
        result.update(
            process_id=jax.process_index(),
            num_processes=jax.process_count(),
            local_devices=jax.local_device_count(),
            global_devices=jax.device_count(),
        )
    except Exception as e:
        traceback.print_exc()
        out.write_text(
            json.dumps({"error": {"type": type(e).__name__, "message": str(e)}})
        )
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip JAX's exit-time shutdown barrier, which would wait for the
        # other processes.
        os._exit(1)
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
