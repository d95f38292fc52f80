"""Runs the benchmark scenarios for upstream Keras 3.15.1 and the fork, side
by side, and prints one table (`make bench`).

Each build gets its own venv under `build/bench/`, made from the pinned
requirements: `keras==3.15.1` from PyPI for upstream, the fork's wheel
(`tools.wheel`, into `build/bench/dist/`) for the fork, in a copy of
upstream's venv. Every run of a scenario is a fresh process on
8 virtual CPU devices. Per scenario, each build first makes a memory run
(sampler, hooks, jit recorder); the `--repeats` timed runs after them run
bare, the two builds alternating (fork first on the first repeat), and wall
time is their median. A timed run first writes as much memory as the
larger of the two memory runs added to the RSS (at least the size of its
checkpoint) and frees it just before its section, so that the section's
new arrays get memory already backed, as the floor's buffer is (see
`warm_bytes`). The floor of a scenario that loads a checkpoint is the
time to read the checkpoint's bytes once, plainly, measured here;
`load_model_*` also time building the model from the archive's config
alone, in separate processes.

Usage: python -m benchmarks.run [--size MIB] [--blocks N] [--repeats N]
                                [--scenarios a,b,...|all]

Without `--scenarios`, the headline scenarios (`DEFAULT_SCENARIOS`) at
`--size` 250; `--scenarios all`: every scenario, at 1000 unless `--size`
says otherwise. A line per scenario, as it ends, gives the time so far and
an estimate of the time left.
"""

import argparse
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from benchmarks.reads import read_into
from tools import hub
from tools.common import BUILD
from tools.common import ROOT
from tools.common import ToolError
from tools.common import main_wrapper
from tools.common import run
from tools.upstream import read_pin

HERE = Path(__file__).resolve().parent
BENCH = BUILD / "bench"
RESULTS = HERE / "results"
BUILDS = ("upstream", "fork")
SCENARIOS = (
    "build_embedding",
    "build_kernels",
    "build_decoder",
    "build_blocks",
    "build_blocks_unsharded",
    "load_h5_embedding",
    "load_h5_embedding_rows",
    "load_h5_decoder",
    "load_sharded_h5_embedding",
    "load_sharded_h5_decoder",
    "load_keras_weights_embedding",
    "load_model_embedding",
    "load_lora_dense",
    "save_h5_embedding",
    "save_sharded_h5_embedding",
    "save_model_embedding",
    "save_lora_dense",
    "set_weights_embedding",
    "assign_embedding",
    "build_then_load_decoder",
    "deferred_build_then_load_decoder",
    "build_then_load_qwen",
    "deferred_build_then_load_qwen",
    "keras_hub_preset_llama",
    "deferred_keras_hub_preset_llama",
    "keras_hub_hf_llama",
    "deferred_keras_hub_hf_llama",
    "hub_keras_preset_llama",
    "hub_hf_llama",
    "hub_hf_llama_int8",
    "hub_hf_gemma_int8",
    "hub_keras_preset_llama_int8",
    "orbax_load_embedding",
    "orbax_build_then_load_embedding",
    "deferred_orbax_build_then_load_embedding",
    "orbax_load_model_embedding",
    "deferred_orbax_load_model_embedding",
    "quantize_int8_dense",
    "quantize_int4_dense",
    "load_then_quantize_llama",
    "quantized_load_llama",
    "read_new_memory_embedding",
    "replace_value_embedding",
)
# `make bench`: one or two scenarios per claim of the README, at a size
# that keeps their ratios (see "Default run" in benchmarks/README.md).
DEFAULT_SCENARIOS = (
    "load_h5_embedding",
    "load_model_embedding",
    "set_weights_embedding",
    "save_model_embedding",
    "build_kernels",
    "deferred_build_then_load_decoder",
    "hub_keras_preset_llama",
    "hub_hf_llama",
    "quantize_int8_dense",
)
DEFAULT_SIZE = 250
ALL_SIZE = 1000
# Seconds per scenario on the 2-core machine with `--repeats 1` (both
# builds' runs), at `DEFAULT_SIZE` for `DEFAULT_SCENARIOS` and at
# `ALL_SIZE` for the others (benchmarks/README.md): their proportions give
# the estimate of the time left (`time_left`).
ESTIMATES = {
    "build_embedding": 71,
    "build_kernels": 25,
    "build_decoder": 63,
    "build_blocks": 100,
    "build_blocks_unsharded": 75,
    "load_h5_embedding": 24,
    "load_h5_embedding_rows": 56,
    "load_h5_decoder": 133,
    "load_sharded_h5_embedding": 66,
    "load_sharded_h5_decoder": 112,
    "load_keras_weights_embedding": 75,
    "load_model_embedding": 39,
    "load_lora_dense": 144,
    "save_h5_embedding": 65,
    "save_sharded_h5_embedding": 55,
    "save_model_embedding": 25,
    "save_lora_dense": 93,
    "set_weights_embedding": 26,
    "assign_embedding": 46,
    "build_then_load_decoder": 124,
    "deferred_build_then_load_decoder": 106,
    "build_then_load_qwen": 38,
    "deferred_build_then_load_qwen": 18,
    "keras_hub_preset_llama": 127,
    "deferred_keras_hub_preset_llama": 97,
    "keras_hub_hf_llama": 136,
    "deferred_keras_hub_hf_llama": 90,
    "hub_keras_preset_llama": 37,
    "hub_hf_llama": 39,
    "hub_hf_llama_int8": 125,
    "hub_hf_gemma_int8": 125,
    "hub_keras_preset_llama_int8": 110,
    "orbax_load_embedding": 83,
    "orbax_build_then_load_embedding": 88,
    "deferred_orbax_build_then_load_embedding": 60,
    "orbax_load_model_embedding": 79,
    "deferred_orbax_load_model_embedding": 60,
    "quantize_int8_dense": 34,
    "quantize_int4_dense": 67,
    "load_then_quantize_llama": 271,
    "quantized_load_llama": 213,
    "read_new_memory_embedding": 42,
    "replace_value_embedding": 36,
}
# Run only when named in `--scenarios`: a full-size model.
OPT_IN_SCENARIOS = ("deferred_keras_hub_llama3_2_3b",)
MIB = 2**20
# Scenarios that upstream cannot run (it raises while building): the table
# says so in its column.
UPSTREAM_FAILS = ("build_then_load_qwen", "deferred_build_then_load_qwen")
# Scenarios that also time building the model from the archive's config
# alone (`scenarios.py --mode config`), once per timed repeat (at least
# once), each in a fresh process.
CONFIG_SCENARIOS = ("load_model_embedding",)
# How many times the floor reads each checkpoint; the median is kept.
FLOOR_READS = 3


def wheel_digest(path):
    """A digest of the wheel's members, not of its bytes: a wheel built
    again from the same tree differs only in its timestamps."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(path) as archive:
        for name in sorted(archive.namelist()):
            digest.update(name.encode() + archive.read(name))
    return digest.hexdigest()


def make_venv(build, base="3.15.1"):
    """Creates (once) the venv of `build` on `base` (3.15.1, or `next`: the
    keras-nightly of `NEXT` and the series rebased onto it); returns its
    python. The fork's venv is a copy of upstream's, made first, with the
    fork's wheel in place of upstream's Keras: the same pins, installed
    once."""
    next_base = base == "next"
    venv = BENCH / (f"venv-next-{build}" if next_base else f"venv-{build}")
    python = venv / "bin" / "python"
    requirements = [ROOT / "requirements.txt", HERE / "requirements.txt"]
    pin = read_pin(ROOT / "NEXT") if next_base else read_pin()
    BENCH.mkdir(parents=True, exist_ok=True)
    if build == "fork":
        from tools import wheel

        keras = wheel.build(dist=BENCH / "dist", next_base=next_base)
    else:
        keras = f"{pin['name']}=={pin['version']}"
    packages = [keras]
    if next_base:
        # keras-hub 0.32.0 does not import on master: the keras-hub of
        # `NEXT` replaces it.
        lines = (HERE / "requirements.txt").read_text().splitlines(True)
        requirement = BENCH / "requirements-next.txt"
        requirement.write_text(
            "".join(x for x in lines if not x.startswith("keras-hub"))
        )
        requirements[1] = requirement
        packages.append(pin["keras_hub"])
    pins = "".join(p.read_text() for p in requirements)
    stamp_text = pins + str(packages)
    if build == "fork":
        stamp_text += wheel_digest(keras)
    stamp = venv / "stamp"
    if stamp.exists() and stamp.read_text() == stamp_text:
        return python
    shutil.rmtree(venv, ignore_errors=True)
    upstream = venv.with_name(venv.name.replace("fork", "upstream"))
    upstream_stamp = upstream / "stamp"
    args = [python, "-m", "pip", "install", "-q", "--no-deps"]
    if (
        build == "fork"
        and upstream_stamp.exists()
        and upstream_stamp.read_text().startswith(pins + "[")
    ):
        shutil.copytree(upstream, venv, symlinks=True)
        (venv / "stamp").unlink()
    else:
        run([sys.executable, "-m", "venv", venv], capture=True)
        for requirement in requirements:
            args += ["-r", requirement]
    run([*args, *packages], capture=True)
    stamp.write_text(stamp_text)
    return python


def scenarios_command(python, scenario, args):
    """The command line of `scenarios.py` for `scenario` (or "prepare")."""
    return [
        python,
        HERE / "scenarios.py",
        scenario,
        "--data",
        data_dir(args),
        "--size",
        str(args.size),
        "--blocks",
        str(args.blocks),
        *(
            ["--keras-hub-tree", str(hub.HUB_TREE)]
            if scenario.startswith("hub_")
            else []
        ),
    ]


def run_scenario(python, scenario, args, mode, build, warm_bytes=0):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        result = subprocess.run(
            [
                *scenarios_command(python, scenario, args),
                "--mode",
                mode,
                "--out",
                out.name,
                "--warm-bytes",
                str(warm_bytes),
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ToolError(
                f"{scenario} ({mode}) failed:\n{result.stderr[-3000:]}"
            )
        report = json.loads(Path(out.name).read_text())
    may_fail = build == "upstream" and scenario in UPSTREAM_FAILS
    if "error" in report and not may_fail:
        raise ToolError(f"{scenario} ({mode}) failed: {report['error']}")
    return report


def available_bytes():
    """The host's `MemAvailable`, in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise ToolError("/proc/meminfo has no MemAvailable line")


def warm_bytes(memory_runs, available, checkpoint_bytes=0):
    """How much memory the timed runs of a scenario write and free just
    before their section (`scenarios.py --warm-bytes`): the most that the
    section added to the RSS in the memory runs of either build, so that
    both builds run with the same, and at least the size of the
    checkpoint it reads; at most a quarter of `available`, so that the
    checkpoints stay in the page cache.

    The RSS increase alone can fall short of the new memory a section
    fills: memory that the process frees meanwhile (the model's previous
    values, XLA's buffers) lowers it. A load fills at least its
    checkpoint's size."""
    most = max((r["rss_increase_bytes"] for r in memory_runs), default=0)
    return max(0, min(max(most, checkpoint_bytes), available // 4))


def data_dir(args):
    return BENCH / f"data-{args.size}-{args.blocks}"


def scenario_reads(python, scenarios, args):
    """{scenario: the checkpoint it reads, relative to the data directory,
    or None}, as `scenarios.py` declares it."""
    result = run(
        [
            *scenarios_command(python, "files", args),
            "--scenarios",
            ",".join(scenarios),
        ],
        capture=True,
    )
    # The last line: JAX or Keras may print before it.
    return json.loads(result.stdout.strip().splitlines()[-1])


def checkpoint_files(path):
    """The files that loading `path` reads: all the files of a directory,
    a sharded `.weights.json` and its shard files, or the file itself."""
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file())
    if path.name.endswith(".weights.json"):
        # A key maps to its shard file, or to a list of them.
        names = set()
        for shards in json.loads(path.read_text())["weight_map"].values():
            names.update([shards] if isinstance(shards, str) else shards)
        return [path, *(path.parent / name for name in sorted(names))]
    return [path]


def read_floor(paths, reads=FLOOR_READS):
    """Reads the files `paths` one after the other, unbuffered, into one
    preallocated buffer, `reads` times; returns (bytes, median seconds)."""
    sizes = [Path(p).stat().st_size for p in paths]
    view = memoryview(bytearray(sum(sizes)))
    seconds = []
    for _ in range(reads):
        start = time.perf_counter()
        try:
            read_into(paths, sizes, view)
        except ValueError as e:
            raise ToolError(str(e)) from e
        seconds.append(time.perf_counter() - start)
    return sum(sizes), statistics.median(seconds)


def measure_floors(reads, data):
    """Measures the floor of each distinct checkpoint of `reads` (see
    `scenario_reads`); returns {checkpoint: its floor}."""
    floors = {}
    for scenario, checkpoint in reads.items():
        if checkpoint is None:
            continue
        if checkpoint not in floors:
            files = checkpoint_files(data / checkpoint)
            num_bytes, seconds = read_floor(files)
            floors[checkpoint] = {
                "num_files": len(files),
                "bytes": num_bytes,
                "seconds": seconds,
                "scenarios": [],
            }
        floors[checkpoint]["scenarios"].append(scenario)
    return floors


def floor_table(floors):
    """The lines that print the floors, above the table."""
    lines = [
        f"floor: each checkpoint read once, unbuffered, into one buffer "
        f"(median of {FLOOR_READS})"
    ]
    for checkpoint, floor in floors.items():
        mib = floor["bytes"] / MIB
        rate = mib / floor["seconds"] if floor["seconds"] else float("inf")
        lines.append(
            f"  {checkpoint:31} {floor['num_files']:3} file(s) "
            f"{mib:8.1f} MiB {floor['seconds']:8.3f} s {rate:8.0f} MiB/s"
        )
    return "\n".join(lines)


def summarize(runs, floor_s=None):
    """Reduces the memory run, the timed runs and the config runs of one
    build to figures; `floor_s`: the floor of the checkpoint it reads."""
    memory_run = runs["memory"]
    if "error" in memory_run:
        return {"error": memory_run["error"]}
    peak = {int(k): v for k, v in memory_run["peak_bytes"].items()}
    final = {int(k): v for k, v in memory_run["final_bytes"].items()}
    busiest = max(peak, key=peak.get)
    walls = [r["wall_s"] for r in runs["time"]] or [memory_run["wall_s"]]
    wall_s = statistics.median(walls)
    written = max(r["written_bytes"] for r in [memory_run, *runs["time"]])
    config = [r["config_s"] for r in runs.get("config", [])]
    config_s = statistics.median(config) if config else None
    time_x_floor = None
    if floor_s:
        time_x_floor = (wall_s - (config_s or 0.0)) / floor_s
    return {
        "device0_peak_mib": peak.get(0, 0) / MIB,
        "device0_peak_x_shard": peak.get(0, 0) / final[0],
        "busiest_device": busiest,
        "busiest_peak_mib": peak[busiest] / MIB,
        "busiest_peak_x_shard": peak[busiest] / final[busiest],
        "rss_increase_mib": memory_run["rss_increase_bytes"] / MIB,
        "wall_s": wall_s,
        "config_s": config_s,
        "floor_s": floor_s,
        "time_x_floor": time_x_floor,
        "written_mib": written / MIB,
        "xla_temp_mib": memory_run["xla_temp_bytes"] / MIB,
        "num_jit_calls": memory_run["num_jit_calls"],
        "peak_mib_per_device": [peak.get(d, 0) / MIB for d in sorted(final)],
        "shard_mib_per_device": [final[d] / MIB for d in sorted(final)],
    }


# A figure whose value is None (no floor, no config build) is left out.
FIGURES = (
    ("device0_peak_mib", "device 0 peak MiB", "{:.0f}"),
    ("device0_peak_x_shard", "device 0 peak / its shards", "{:.2f}"),
    ("busiest_peak_mib", "busiest device peak MiB", "{:.0f}"),
    ("busiest_peak_x_shard", "busiest peak / its shards", "{:.2f}"),
    ("rss_increase_mib", "process peak RSS increase MiB", "{:.0f}"),
    ("wall_s", "wall time s (median)", "{:.2f}"),
    ("config_s", "config build s (median)", "{:.2f}"),
    ("time_x_floor", "time / floor", "{:.1f}"),
    ("written_mib", "bytes written MiB", "{:.1f}"),
    ("xla_temp_mib", "XLA temporaries MiB (largest)", "{:.1f}"),
)


def table(results):
    lines = [
        f"{'scenario':26} {'figure':31} {'upstream':>9} {'fork':>9} "
        f"{'fork/up':>7}"
    ]
    for scenario, builds in results.items():
        up_failed = "error" in builds["upstream"]
        if up_failed:
            error = builds["upstream"]["error"].partition(":")[0]
            lines.append(f"{scenario:26} upstream fails: {error}")
            scenario = ""
        for key, title, fmt in FIGURES:
            fork = builds["fork"][key]
            if fork is None:
                continue
            up = None if up_failed else builds["upstream"][key]
            ratio = f"{fork / up:.2f}" if up else "-"
            up_text = "fails" if up_failed else fmt.format(up)
            lines.append(
                f"{scenario:26} {title:31} {up_text:>9} "
                f"{fmt.format(fork):>9} {ratio:>7}"
            )
            scenario = ""
    return "\n".join(lines)


def chart(results, path):
    """A summary panel (per scenario: busiest peak / its shards, time /
    floor, both builds), then each scenario's per-device peaks."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    names = list(results)
    figure = pyplot.figure(
        figsize=(14, 6 + 2.2 * len(names)), layout="constrained"
    )
    top, bottom = figure.subfigures(2, 1, height_ratios=[6, 2.2 * len(names)])
    left, right = top.subplots(1, 2)
    summary_panel(
        left,
        results,
        "busiest_peak_x_shard",
        "busiest device peak / its shards",
    )
    summary_panel(right, results, "time_x_floor", "time / floor (log scale)")
    axes = bottom.subplots(len(names), 1, squeeze=False)[:, 0]
    for axis, name in zip(axes, names):
        for offset, build in ((-0.2, "upstream"), (0.2, "fork")):
            if "error" in results[name][build]:
                continue
            peaks = results[name][build]["peak_mib_per_device"]
            axis.bar(
                [d + offset for d in range(len(peaks))],
                peaks,
                width=0.4,
                label=build,
            )
        shards = results[name]["fork"]["shard_mib_per_device"]
        axis.step(
            [d - 0.5 for d in range(len(shards) + 1)],
            shards + shards[-1:],
            where="post",
            color="black",
            label="final shards",
        )
        axis.set_title(name, fontsize=9)
        axis.set_ylabel("peak MiB")
    axes[0].legend(fontsize=8)
    axes[-1].set_xlabel("device")
    figure.savefig(path, dpi=80)


def summary_panel(axis, results, key, title):
    """Bars of figure `key`, upstream and fork, for each scenario that has
    it (an upstream failure leaves its bar out)."""
    names = [n for n in results if results[n]["fork"].get(key) is not None]
    for offset, build in ((-0.2, "upstream"), (0.2, "fork")):
        positions, values = [], []
        for position, name in enumerate(names):
            if "error" not in results[name][build]:
                positions.append(position + offset)
                values.append(results[name][build][key])
        axis.bar(positions, values, width=0.4, label=build)
    # 1 is the ideal of both figures: no transient copy, the disk's speed.
    axis.axhline(1, color="black", linewidth=0.8)
    if key == "time_x_floor":
        axis.set_yscale("log")
    # Room above the bars for the legend.
    bottom, top = axis.get_ylim()
    axis.set_ylim(bottom, top * (4 if key == "time_x_floor" else 1.25))
    axis.set_xticks(range(len(names)))
    axis.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    axis.set_xlim(-0.6, len(names) - 0.4)
    axis.set_title(title, fontsize=9)
    axis.legend(fontsize=8)


def select(text):
    """The scenarios that `--scenarios` names: a list separated by commas,
    `all`, or nothing for `DEFAULT_SCENARIOS`."""
    if not text:
        return list(DEFAULT_SCENARIOS)
    if text == "all":
        return list(SCENARIOS)
    names = [s for s in text.split(",") if s]
    unknown = sorted(set(names) - set(SCENARIOS) - set(OPT_IN_SCENARIOS))
    if unknown:
        raise ToolError(
            f"unknown scenarios {unknown}; known: "
            f"{SCENARIOS + OPT_IN_SCENARIOS}, or all"
        )
    return names


def duration(seconds):
    """`seconds` as "42 s" or "3 min 05 s"."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60:02d} s"


def time_left(done, todo):
    """An estimate of the seconds that the scenarios `todo` will take, from
    the seconds that the finished ones took (`done`, {scenario: seconds}):
    the figures of `ESTIMATES`, scaled by how the finished scenarios
    compared with theirs (a scenario without an estimate counts as their
    mean)."""
    mean = statistics.mean(ESTIMATES.values())
    done_estimate = sum(ESTIMATES.get(s, mean) for s in done)
    todo_estimate = sum(ESTIMATES.get(s, mean) for s in todo)
    return sum(done.values()) * todo_estimate / done_estimate


def progress(done, todo, elapsed):
    """The line printed as a scenario ends: its index, name and time, the
    time since the run began (`elapsed`) and an estimate of what is left;
    `done`: {scenario: seconds}, the last one just ended."""
    name, seconds = list(done.items())[-1]
    total = len(done) + len(todo)
    return (
        f"[{len(done)}/{total}] {name}: {duration(seconds)}; "
        f"{duration(elapsed)} so far, about "
        f"{duration(time_left(done, todo))} left"
    )


def lap(laps, name, start):
    """Records in `laps`, as `name`, the seconds since `start` that it does
    not hold yet."""
    laps[name] = time.perf_counter() - start - sum(laps.values())


def main():
    start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size",
        type=int,
        help=f"MiB of the embedding: {DEFAULT_SIZE}, or {ALL_SIZE} with "
        "--scenarios all",
    )
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--scenarios",
        help="a,b,...; all: every scenario; default: the headline ones",
    )
    parser.add_argument(
        "--base",
        choices=("3.15.1", "next"),
        default="3.15.1",
        help="next: keras-nightly (NEXT) against the series rebased onto it",
    )
    args = parser.parse_args()
    scenarios = select(args.scenarios)
    if args.size is None:
        args.size = ALL_SIZE if args.scenarios == "all" else DEFAULT_SIZE
    setup = {}
    pythons = {}
    for build in BUILDS:
        pythons[build] = make_venv(build, args.base)
        lap(setup, f"{build} venv", start)
    if any(s.startswith("hub_") for s in scenarios):
        # Both builds import it: on 3.15.1 it is keras-hub 0.32.0 as is.
        hub.materialize()
        lap(setup, "keras-hub tree", start)
    # Writes the checkpoints the scenarios read, those not written yet.
    run(
        [
            *scenarios_command(pythons["upstream"], "prepare", args),
            "--scenarios",
            ",".join(scenarios),
        ],
        capture=True,
    )
    lap(setup, "checkpoints", start)
    reads = scenario_reads(pythons["upstream"], scenarios, args)
    floors = measure_floors(reads, data_dir(args))
    lap(setup, "floors", start)
    print(
        "setup: "
        + ", ".join(f"{k} {duration(v)}" for k, v in setup.items())
        + f"; checkpoints in {data_dir(args)}; "
        f"{len(scenarios)} scenarios, embedding {args.size} MiB",
        flush=True,
    )
    available = available_bytes()
    raw, results, done = {}, {}, {}
    for scenario in scenarios:
        scenario_start = time.perf_counter()
        runs = {b: {"memory": None, "time": [], "config": []} for b in BUILDS}
        for build in BUILDS:
            runs[build]["memory"] = run_scenario(
                pythons[build], scenario, args, "memory", build
            )
        ran = [b for b in BUILDS if "error" not in runs[b]["memory"]]
        floor = floors.get(reads[scenario])
        warm = warm_bytes(
            [runs[b]["memory"] for b in ran],
            available,
            floor["bytes"] if floor else 0,
        )
        runs["warm_bytes"] = warm
        modes = ["time"] * args.repeats
        if scenario in CONFIG_SCENARIOS:
            modes += ["config"] * max(args.repeats, 1)
        for repeat, mode in enumerate(modes):
            for build in ran if repeat % 2 else ran[::-1]:
                runs[build][mode].append(
                    run_scenario(
                        pythons[build], scenario, args, mode, build, warm
                    )
                )
        raw[scenario] = runs
        floor_s = floor["seconds"] if floor else None
        results[scenario] = {b: summarize(runs[b], floor_s) for b in BUILDS}
        done[scenario] = time.perf_counter() - scenario_start
        runs["seconds"] = done[scenario]
        todo = scenarios[len(done) :]
        elapsed = time.perf_counter() - start
        print(progress(done, todo, elapsed), flush=True)
    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / f"bench-size{args.size}-blocks{args.blocks}"
    if args.base == "next":
        stem = stem.with_name(f"{stem.name}-next")
    versions = {
        b: raw[scenarios[0]][b]["memory"]["keras_version"] for b in BUILDS
    }
    report = {
        "settings": vars(args),
        "keras_versions": versions,
        "floors": floors,
        "setup_seconds": setup,
        "results": results,
        "raw": raw,
    }
    Path(f"{stem}.json").write_text(json.dumps(report, indent=1))
    chart(results, f"{stem}.png")
    print(
        f"\nkeras: upstream {versions['upstream']}, fork {versions['fork']}; "
        f"embedding {args.size} MiB, decoder {args.blocks} blocks, "
        f"8 CPU devices, {args.repeats} timed repeat(s)\n"
    )
    print(floor_table(floors) + "\n")
    print(table(results))
    print(
        f"\nwrote {stem}.json and {stem}.png; "
        f"{duration(time.perf_counter() - start)} in all"
    )


if __name__ == "__main__":
    main_wrapper(main)
