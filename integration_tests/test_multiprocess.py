"""Sharded init, load and save across 2 JAX processes of 4 CPU devices.

Each test runs one scenario of `worker.py` in 2 processes that form one
global mesh of 8 devices (see `multiprocess.py`), with an 8 MiB embedding
sharded by column and a dense kernel sharded by row.
"""

import time

import h5py
import pytest

from integration_tests import multiprocess

SIZE = 8
NUM_PROCESSES = 2
DEVICES = 4
MIB = 2**20
# A block of rows gathered across processes: 16 MiB shared by the devices
# and the host of a process. A device holds at most the block being
# written (a view of its buffer), the next one and the slices it comes
# from.
GATHER_BYTES_PER_DEVICE = 3 * 16 * MIB // (DEVICES + 1)
# What a process that writes none of the file may still write to storage
# while saving: a few pages, far below one shard (1 MiB).
OTHER_WRITES = 64 * 1024


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("multiprocess")
    multiprocess.prepare(path, size=SIZE)
    return path


def run(scenario, workdir):
    return multiprocess.launch(
        scenario, workdir, NUM_PROCESSES, DEVICES, size=SIZE
    )


def own_bytes():
    return multiprocess.own_bytes(SIZE, NUM_PROCESSES, DEVICES)


def num_local_shards():
    return 3 * DEVICES  # embeddings, kernel, bias


def test_build_holds_only_local_shards(workdir):
    results = run("build", workdir).check()
    for result in results:
        assert result["global_devices"] == NUM_PROCESSES * DEVICES
        assert result["local_devices"] == DEVICES
        assert not result["fully_addressable"]
        assert result["bytes_held"] == own_bytes()
        # Equal to the single-process build with the same seed.
        assert result["checked_shards"] == num_local_shards()


def test_load_weights_reads_only_local_slices(workdir):
    results = run("load", workdir).check()
    for result in results:
        # Its own slices, plus the file's metadata.
        assert own_bytes() <= result["bytes_read"] <= own_bytes() + MIB // 4
        assert result["bytes_held"] == own_bytes()
        assert result["checked_shards"] == num_local_shards()
        # The old value and the new one: 2 shards on the busiest device.
        assert result["peak_device_bytes"] <= 2 * result["largest_device_bytes"]


def test_set_weights_and_assign_place_local_shards(workdir):
    results = run("assign", workdir).check()
    for result in results:
        assert result["checked_shards"] == 2 * num_local_shards()
        assert result["peak_device_bytes"] <= 2 * result["largest_device_bytes"]


def test_save_weights_writes_one_file_from_the_first_process(workdir):
    results = run("save", workdir).check()
    size = (workdir / "saved.weights.h5").stat().st_size
    # Only process 0 wrote; every process read back exact values, from the
    # single file and from a sharded save loaded into a new model.
    assert results[0]["bytes_written"] >= size
    assert results[1]["bytes_written"] < OTHER_WRITES
    for result in results:
        # Its own shard and, at most, one gathered block.
        assert result["peak_device_bytes"] <= (
            result["largest_device_bytes"] + GATHER_BYTES_PER_DEVICE
        )
        assert result["checked_variables"] == 3
        assert result["checked_shards"] == num_local_shards()
    with h5py.File(workdir / "saved.weights.h5") as f:
        assert f["layers/embedding/vars/0"].shape == (
            multiprocess.rows(SIZE),
            multiprocess.EMBED_DIM,
        )


def test_save_model_writes_one_archive_from_the_first_process(workdir):
    results = run("save_model", workdir).check()
    size = (workdir / "saved.keras").stat().st_size
    assert results[0]["bytes_written"] >= size
    assert results[1]["bytes_written"] < OTHER_WRITES
    for result in results:
        # Every process loaded the archive back, exactly.
        assert result["checked_shards"] == num_local_shards()
        # Its own shard and, at most, one gathered block.
        assert result["peak_device_bytes"] <= (
            result["largest_device_bytes"] + GATHER_BYTES_PER_DEVICE
        )


def test_save_fails_in_every_process_without_hanging(workdir):
    start = time.monotonic()
    results = run("save_fails", workdir).check()
    assert time.monotonic() - start < 60
    for name in ("save_weights", "save"):
        # Process 0 could not create the file; process 1 says so.
        assert results[0]["errors"][name]["type"] == "FileNotFoundError"
        error = results[1]["errors"][name]
        assert error["type"] == "ValueError"
        assert "failed in process 0" in error["message"]
        assert "missing/saved" in error["message"]
    # A write that fails halfway in process 0: its error there, one naming
    # process 0 in the other; then both save again, and load it exactly.
    assert results[0]["errors"]["write"]["type"] == "OSError"
    assert "injected" in results[0]["errors"]["write"]["message"]
    assert results[1]["errors"]["write"]["type"] == "ValueError"
    assert "failed in process 0" in results[1]["errors"]["write"]["message"]
    for result in results:
        assert result["checked_after_failure"] == num_local_shards()


def test_bad_shape_fails_in_its_process_and_the_others_end(workdir):
    start = time.monotonic()
    run_ = run("bad_shape", workdir)
    assert time.monotonic() - start < 60
    assert run_.returncodes[1] == 1
    error = run_.results[1]["error"]
    assert error["type"] == "ValueError"
    assert "embedding/embeddings" in error["message"]
    assert f"value.shape=({multiprocess.rows(SIZE)}, 512)" in error["message"]
    # Process 0 loaded its own checkpoint, then waited for process 1 at
    # exit; the launcher stopped it.
    assert run_.returncodes[0] is not None


def test_deferred_build_places_nothing_then_load_places_shards(workdir):
    results = run("deferred_load", workdir).check()
    for result in results:
        assert result["arrays_placed_by_build"] == 0
        assert result["bytes_held"] == own_bytes()
        assert result["checked_shards"] == num_local_shards()
        # Only the loaded shards (there is no old value), plus the few
        # bytes of the scalars of the end-of-load barrier.
        assert (
            result["peak_device_bytes"] <= result["largest_device_bytes"] + 1024
        )


def test_orbax_checkpoint_restores_into_deferred_model(workdir):
    results = run("orbax", workdir).check()
    for result in results:
        # Trained and saved with `OrbaxCheckpoint` by both processes, then
        # restored exactly: each process reads and holds only its shards.
        assert result["live_before"] == 0
        assert result["checked_shards"] == num_local_shards()
        assert result["bytes_held"] == own_bytes()
        assert (
            result["peak_device_bytes"] <= result["largest_device_bytes"] + 1024
        )


def test_repaired_layout_saves_and_loads(workdir):
    results = run("repaired", workdir).check()
    for result in results:
        # 12 columns on 8 devices: sharded by its 16 rows instead.
        assert result["kernel_spec"] == ["model", "None"]
        assert result["kernel_shard_shape"] == [2, 12]
        assert result["checked_shards"] == 2 * DEVICES


def test_launcher_stops_processes_at_the_deadline(workdir):
    start = time.monotonic()
    run_ = multiprocess.launch(
        "hang", workdir, NUM_PROCESSES, DEVICES, size=SIZE, timeout=10
    )
    assert time.monotonic() - start < 30
    assert run_.killed == [True, True]
    assert run_.results == [None, None]


def test_keras_hub_reads_only_local_slices_of_safetensors(workdir):
    """`from_preset` of a Hugging Face directory (keras-hub with
    patches-hub/): each process reads from storage the slices its devices
    need, not the checkpoint."""
    results = run("hub_hf", workdir).check()
    if not any(result["bytes_read"] for result in results):
        pytest.skip("this filesystem does not count reads in read_bytes")
    for result in results:
        assert result["keras_hub"].startswith(str(multiprocess.HUB_TREE))
        # Its slices, plus what the kernel reads ahead around them.
        needed = result["needed_bytes"]
        assert needed <= result["bytes_read"] <= needed + 16 * MIB
        assert result["bytes_read"] < 0.8 * result["checkpoint_bytes"]
        # Built without values: each device holds only the shards it
        # loads, never a whole tensor.
        assert result["peak_device_bytes"] <= result["largest_device_bytes"]
