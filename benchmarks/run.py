"""Runs the benchmark scenarios for upstream Keras 3.15.1 and the fork, side
by side, and prints one table (`make bench`).

Each build gets its own venv under `build/bench/`, made from the pinned
requirements: `keras==3.15.1` from PyPI for upstream, the fork's wheel
(`make wheel`) for the fork. Every run of a scenario is a fresh process on
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
                                [--scenarios a,b,...]
"""

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.reads import read_into
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


def make_venv(build, base="3.15.1"):
    """Creates (once) the venv of `build` on `base` (3.15.1, or `next`: the
    keras-nightly of `NEXT` and the series rebased onto it); returns its
    python."""
    next_base = base == "next"
    venv = BENCH / (f"venv-next-{build}" if next_base else f"venv-{build}")
    python = venv / "bin" / "python"
    requirements = [ROOT / "requirements.txt", HERE / "requirements.txt"]
    pin = read_pin(ROOT / "NEXT") if next_base else read_pin()
    if build == "fork":
        from tools import wheel

        keras = wheel.build(next_base=next_base)
    else:
        keras = f"{pin['name']}=={pin['version']}"
    packages = [keras]
    if next_base:
        # keras-hub 0.32.0 does not import on master: the keras-hub of
        # `NEXT` replaces it.
        lines = (HERE / "requirements.txt").read_text().splitlines(True)
        requirement = BENCH / "requirements-next.txt"
        BENCH.mkdir(parents=True, exist_ok=True)
        requirement.write_text(
            "".join(x for x in lines if not x.startswith("keras-hub"))
        )
        requirements[1] = requirement
        packages.append(pin["keras_hub"])
    stamp_text = "".join(p.read_text() for p in requirements) + str(packages)
    if build == "fork":
        stamp_text += hashlib.sha256(Path(keras).read_bytes()).hexdigest()
    stamp = venv / "stamp"
    if stamp.exists() and stamp.read_text() == stamp_text:
        return python
    run([sys.executable, "-m", "venv", "--clear", venv], capture=True)
    args = [python, "-m", "pip", "install", "-q", "--no-deps"]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument(
        "--base",
        choices=("3.15.1", "next"),
        default="3.15.1",
        help="next: keras-nightly (NEXT) against the series rebased onto it",
    )
    args = parser.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = sorted(set(scenarios) - set(SCENARIOS) - set(OPT_IN_SCENARIOS))
    if unknown:
        raise ToolError(
            f"unknown scenarios {unknown}; known: "
            f"{SCENARIOS + OPT_IN_SCENARIOS}"
        )
    pythons = {build: make_venv(build, args.base) for build in BUILDS}
    # Writes the checkpoints the scenarios read, those not written yet.
    print(f"checkpoints in {data_dir(args)}", flush=True)
    run(
        [
            *scenarios_command(pythons["upstream"], "prepare", args),
            "--scenarios",
            ",".join(scenarios),
        ],
        capture=True,
    )
    reads = scenario_reads(pythons["upstream"], scenarios, args)
    floors = measure_floors(reads, data_dir(args))
    available = available_bytes()
    raw, results = {}, {}
    for scenario in scenarios:
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
        print(f"done: {scenario}", flush=True)
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
    print(f"\nwrote {stem}.json and {stem}.png")


if __name__ == "__main__":
    main_wrapper(main)
