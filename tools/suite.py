"""Runs the test suites against the materialized tree.

`test` (the README's test command) first checks the series (see
`check_series.py`), then runs the stages of `stages()`, the configurations
of upstream CI that the series concerns, on 8 virtual CPU devices unless
said otherwise:
  1. jax: upstream's multi-device tier over the whole unit suite on 4
     devices, as upstream CI runs it (`pytest keras -m multi_device`,
     collected from the files that mention the marker); the tests the
     series adds or changes on 1 device, as upstream CI runs the unit
     suite (multi-device tests skip); then the upstream suites the fork
     touches, multi-device tests included: the fixed list `SUITES` plus
     the test files beside every file a patch changes;
  2. jax with `KERAS_NNX_ENABLED=true` over `NNX_SUITES` and the tests
     the series adds or changes;
  3. tensorflow, torch and numpy over `BACKEND_SUITES`;
  4. the project's own tests (`tools/tests`, `benchmarks/tests`,
     `integration_tests`), on the fork only, then the keras-hub tests
     again on 16 devices, and upstream's keras-hub tests of what
     `patches-hub/` changes with the series' own (`HUB_SUITES`) on
     `build/keras-hub`, on 8 devices and on 1.
Failures listed in `known-failures.txt` are tolerated, on the base tree and
on the fork alike; any other failure fails the run. Tests skipped because
an upstream fixture is missing from the sdist are counted apart.

`full --chunk i/N --config CONFIG` runs one deterministic chunk of the
whole upstream unit suite in one configuration of `FULL_CONFIGS` and writes
its failing test ids to `full-results/CONFIG/TREE/` (committed, so that a
configuration can be run in chunks over several sessions), on 3.15.1
(`upstream`), the fork, or the nightly pair of `tools.next` (`next-upstream`,
`next`; JAX configurations only); `compare` diffs each fork's failures
against its base's in every configuration run on both. `gate` runs, one
at a time, every chunk that `pending` lists (missing, or run on other
content than the tree holds now), then `compare`.

Usage: python -m tools.suite test|full|compare|gate|pending
       [--tree fork|upstream|next|next-upstream] [--chunk i/N]
       [--config CONFIG]
"""

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tools import check_series
from tools import hub
from tools.common import BASE_TREE
from tools.common import KNOWN_FAILURES
from tools.common import PATCHES
from tools.common import ROOT
from tools.common import TEST_ENV
from tools.common import TREE
from tools.common import ToolError
from tools.common import git
from tools.common import main_wrapper
from tools.common import read_series
from tools.tree import materialize

# The upstream suites that the fork's patches are about. No patch changes
# `keras/src/models` or `keras/src/optimizers`: their loading paths run in
# `keras/src/saving`.
SUITES = (
    "keras/src/backend",
    "keras/src/distribution",
    "keras/src/initializers",
    "keras/src/saving",
    "keras/src/layers/core",
    # How Orbax checkpoints load (`saving_api.py`): the callback's tests
    # write and load them.
    "keras/src/callbacks/orbax_checkpoint_test.py",
)
# Run again with Flax NNX variables, with the series' own test files: the
# suites of the variables and their initializers.
NNX_SUITES = (
    "keras/src/backend/common",
    "keras/src/initializers",
)
# The backend-neutral suites that the series changes, run on the other
# backends of upstream CI.
OTHER_BACKENDS = ("tensorflow", "torch", "numpy")
BACKEND_SUITES = (
    "keras/src/backend/common",
    # The initializers and layers the series changes (0007, 0008, 0010,
    # 0015); the rest of `layers/core` runs on JAX only.
    "keras/src/initializers",
    "keras/src/layers/core/dense_test.py",
    "keras/src/layers/core/einsum_dense_test.py",
    "keras/src/layers/layer_test.py",
    "keras/src/metrics",
    "keras/src/random",
    "keras/src/saving",
    "keras/src/callbacks/orbax_checkpoint_test.py",
)
PROJECT_TESTS = ("tools/tests", "benchmarks/tests", "integration_tests")
# Test files beside a changed file that never reach the change: GPTQ and
# AWQ do not call `abs_max_quantize()` (0010), and take 4 min here.
UNREACHED_TESTS = (
    "keras/src/quantizers/awq_test.py",
    "keras/src/quantizers/gptq_core_test.py",
    "keras/src/quantizers/gptq_test.py",
)
# Run again on 16 devices, where more of the real head counts do not divide.
KERAS_HUB_TESTS = "integration_tests/test_keras_hub.py"
# Upstream's keras-hub tests of the code the hub series changes, run on
# build/keras-hub beside the series' own (`tools/hub.py`), when the base
# has them.
HUB_SUITES = (
    "keras_hub/src/utils/preset_utils_test.py",
    "keras_hub/src/models/backbone_test.py",
    "keras_hub/src/models/task_test.py",
    # The converters that `transformers/preset_loader.py` and
    # `safetensor_utils.py` run (their hf:// tests skip offline).
    "keras_hub/src/utils/transformers/convert_*_test.py",
)
# Committed: a configuration takes about an hour per tree on 2 cores.
FULL_RESULTS = ROOT / "full-results"
FULL_SUITE_RESULTS = ROOT / "full-suite-results.txt"
COUNTED = ("passed", "failed", "skipped", "errors", "seconds")
# Test modules whose test ids contain memory addresses, which differ between
# pytest-xdist workers; they run in a separate pytest process without xdist.
SERIAL = ("keras/src/wrappers/sklearn_test.py",)
PYTEST = (
    "-m",
    "pytest",
    "-q",
    "-rfEs",
    "-p",
    "no:cacheprovider",
    "-o",
    "addopts=",
)
OUTCOMES = ("passed", "failed", "skipped", "errors", "error", "deselected")
# The skip reason of the harness's `conftest.py` for a missing fixture.
MISSING_FIXTURE = "upstream fixture missing from the sdist"


def read_known_failures(path=KNOWN_FAILURES):
    """Returns {(config, test id): reason} from the known-failures file.

    A line `[config] test_id # reason` applies to one configuration of
    `stages()` (`jax`, `jax-nnx`, `tensorflow`, `torch`, `numpy`); a line
    without `[config]` applies to all of them. `config` is None for those.
    """
    known = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        entry, _, reason = line.partition(" # ")
        if not reason.strip():
            raise ToolError(f"{path}: no reason given for {entry}")
        config = None
        match = re.match(r"\[([\w-]+)\]\s+(.*)", entry)
        if match:
            config, entry = match.groups()
        known[(config, entry.strip())] = reason.strip()
    return known


def is_known(config, test_id, known):
    """Whether `test_id` may fail in `config`. A `[jax]` entry also holds
    for the jax runs on another device count (`jax-1`, `jax-4`, ...)."""
    configs = {config, None}
    if config.partition("-")[2].isdigit():
        configs.add(config.partition("-")[0])
    return any((c, test_id) in known for c in configs)


def patched_test_files(tree, patches_dir=PATCHES, prefix="keras/src/"):
    """The test files under `prefix` that some patch changes and that
    exist in `tree`."""
    files = set()
    for name in read_series(patches_dir):
        text = (Path(patches_dir) / name).read_text()
        for path in re.findall(r"^diff --git a/(\S+_test\.py) b/", text, re.M):
            if path.startswith(prefix) and (Path(tree) / path).exists():
                files.add(path)
    return sorted(files)


def series_tests(tree, tree_kind):
    """The test classes and functions of the series' test files that the
    series adds or changes (on the base tree, which lacks them: the whole
    files)."""
    files = patched_test_files(tree)
    if tree_kind != "fork":
        return files
    return [
        test
        for path in files
        for test in check_series.changed_tests(tree, path, base="upstream")
    ]


def multi_device_test_files(tree):
    """The test files of `tree` that mention the `multi_device` marker: the
    only ones `pytest keras -m multi_device` runs tests from. Naming them
    spares each worker importing every other test module to collect it."""
    return sorted(
        str(path.relative_to(tree))
        for path in (Path(tree) / "keras").rglob("*_test.py")
        if "multi_device" in path.read_text()
    )


def patched_folders(patches_dir=PATCHES):
    """Folders under `keras/src` that hold a file some patch changes."""
    folders = set()
    for name in read_series(patches_dir):
        text = (Path(patches_dir) / name).read_text()
        for path in re.findall(r"^diff --git a/(\S+) b/", text, re.M):
            if path.startswith("keras/src/"):
                folders.add(str(Path(path).parent))
    return sorted(folders)


def run_pytest(args, cwd, env=None):
    """Runs pytest, echoing its output; returns (exit code, failed ids,
    outcome counts, ids skipped for a missing fixture)."""
    full_env = dict(os.environ)
    full_env.update(TEST_ENV)
    full_env.update(env or {})
    proc = subprocess.Popen(
        [sys.executable, *PYTEST, *args],
        cwd=cwd,
        env=full_env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    failed = set()
    no_fixture = []
    counts = dict.fromkeys(OUTCOMES, 0)
    last = ""
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        match = re.match(r"(FAILED|ERROR) (\S+\.py\S*)", line)
        if match:
            # Memory addresses in parametrized ids differ from run to run.
            failed.add(re.sub(r"0x[0-9a-f]+", "0x", match.group(2)))
        if line.startswith("SKIPPED") and MISSING_FIXTURE in line:
            no_fixture.append(line.split(f"{MISSING_FIXTURE}: ")[-1].strip())
        # pytest's summary line; TensorFlow can log to stderr after it.
        if re.search(r"\d+ \w+.* in [\d.]+s", line):
            last = line
    proc.wait()
    for number, outcome in re.findall(r"(\d+) (\w+)", last):
        if outcome in counts:
            counts[outcome] += int(number)
    counts["errors"] += counts.pop("error")
    return proc.returncode, failed, counts, no_fixture


def stages(tree, tree_kind):
    """The test stages: (title, config, cwd, pytest args, environment)."""
    # The test files beside every file a patch changes, unless a suite of
    # `SUITES` holds them already (pytest would collect them twice).
    suites = list(SUITES)
    for folder in patched_folders():
        if not any(f"{folder}/".startswith(f"{s}/") for s in SUITES):
            suites += sorted(
                str(p.relative_to(tree))
                for p in (Path(tree) / folder).glob("*_test.py")
                if str(p.relative_to(tree)) not in UNREACHED_TESTS
            )
    # Upstream's own tests in the series' test files already run on 8
    # devices in the touched suites; on 1 device and with NNX, the tests
    # the series adds or changes.
    own_tests = series_tests(tree, tree_kind)
    nnx_tests = [
        t
        for t in own_tests
        if not any(t.startswith(f"{s}/") for s in NNX_SUITES)
    ]
    result = [
        # As upstream CI runs it: `JAX_NUM_CPU_DEVICES=4 pytest keras -m
        # multi_device`, the same tests collected from fewer files.
        (
            "multi-device tier on 4 devices",
            "jax-4",
            tree,
            ["-n", "2", "-m", "multi_device", *multi_device_test_files(tree)],
        ),
        # As upstream CI runs the unit suite: one device, so the
        # multi-device tests skip.
        (
            "the series' tests on 1 device",
            "jax-1",
            tree,
            ["-n", "2", *own_tests],
        ),
        # Multi-device tests included: the series' tests on 8 devices.
        ("touched suites", "jax", tree, ["-n", "2", *suites]),
        (
            "NNX: variables, initializers and the series' tests",
            "jax-nnx",
            tree,
            ["-n", "2", *NNX_SUITES, *nnx_tests],
        ),
    ]
    for backend in OTHER_BACKENDS:
        result.append(
            ("backend suites", backend, tree, ["-n", "2", *BACKEND_SUITES])
        )
    if tree_kind == "fork":
        # One file per worker: the files' module fixtures build once.
        result.append(
            (
                "project tests",
                "jax",
                ROOT,
                ["-n", "2", "--dist", "loadfile", *PROJECT_TESTS],
            )
        )
        result.append(
            ("keras-hub tests on 16 devices", "jax-16", ROOT, [KERAS_HUB_TESTS])
        )
        hub_tests = [
            str(f.relative_to(hub.HUB_TREE))
            for pattern in (
                *HUB_SUITES,
                *patched_test_files(
                    hub.HUB_TREE, hub.HUB_PATCHES, prefix="keras_hub/src/"
                ),
            )
            for f in hub.HUB_TREE.glob(pattern)
        ]
        for config in ("jax", "jax-1"):
            result.append(
                (
                    "keras-hub 0.32.0 + patches-hub/",
                    config,
                    hub.HUB_TREE,
                    ["-n", "2", *sorted(set(hub_tests))],
                )
            )
        # On a Keras without the fork's API every hub patch must behave as
        # keras-hub 0.32.0 does: its own tests pass or skip there.
        result.append(
            (
                "keras-hub 0.32.0 + patches-hub/ on Keras 3.15.1",
                "jax",
                hub.HUB_TREE,
                patched_test_files(
                    hub.HUB_TREE, hub.HUB_PATCHES, prefix="keras_hub/src/"
                ),
                BASE_TREE,
            )
        )
    return [
        (title, config, cwd, args, _config_env(config, keras_tree, cwd))
        for title, config, cwd, args, keras_tree in (
            (*stage, tree) if len(stage) == 4 else stage for stage in result
        )
    ]


def _config_env(config, tree, cwd):
    backend = config.partition("-")[0]
    env = {"KERAS_BACKEND": backend}
    if config == "jax-nnx":
        env["KERAS_NNX_ENABLED"] = "true"
    devices = config.partition("-")[2]
    if devices.isdigit():
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    if cwd != tree:
        env["PYTHONPATH"] = str(tree)
    return env


def test(tree_kind="fork"):
    if tree_kind in NEXT_TREES:
        raise ToolError(
            "the test command runs on TREE=fork or TREE=upstream; the "
            "nightly trees have `make next-test`"
        )
    tree = _materialize(tree_kind)
    known = read_known_failures()
    totals = dict.fromkeys(("passed", "failed", "skipped", "errors"), 0)
    all_failed = set()
    no_fixture = []
    broken = []
    times = []
    if tree_kind == "fork":
        # Each patch's tests at its place in the series: `make
        # check-series`. Every test file runs on the final trees below.
        print("\n=== series check: each patch applies, imports, lints")
        if not check_series.check(run_tests=False):
            broken.append("the series check failed")
        print("\n=== hub series check: each hub patch applies, imports, lints")
        if not hub.check(run_tests=False):
            broken.append("the hub series check failed")
        hub.materialize()
        # For the hub patches' tests on stock Keras.
        materialize(BASE_TREE, base_only=True)
    for title, config, cwd, args, env in stages(tree, tree_kind):
        print(f"\n=== {config}: {title}: pytest {' '.join(args)}", flush=True)
        start = time.monotonic()
        code, failed, counts, skipped = run_pytest(args, cwd, env)
        times.append((f"{config}: {title}", time.monotonic() - start))
        # 0: all passed, 1: some failed, 5: nothing collected.
        if code not in (0, 1, 5) or (code == 1 and not failed):
            broken.append(f"{config}: {title} exited with code {code}")
        all_failed |= {(config, test_id) for test_id in failed}
        no_fixture += skipped
        for key in totals:
            totals[key] += counts[key]
    unexpected = sorted(
        (c, t) for c, t in all_failed if not is_known(c, t, known)
    )
    seen_known = len(all_failed) - len(unexpected)
    print(f"\n=== summary ({tree_kind} tree: {tree})")
    for title, seconds in times:
        print(f"{seconds:7.0f} s  {title}")
    print(f"known failures seen: {seen_known} ({len(known)} listed)")
    for config, test_id in unexpected:
        print(f"UNEXPECTED FAILURE [{config}] {test_id}")
    for fixture in sorted(set(no_fixture)):
        print(f"SKIPPED, {MISSING_FIXTURE}: {fixture}")
    for problem in broken:
        print(f"BROKEN RUN {problem}")
    print(
        f"summary: {totals['passed']} passed, {len(unexpected)} failed, "
        f"{totals['skipped']} skipped ({len(no_fixture)} for a missing "
        "fixture)"
    )
    return 1 if unexpected or broken else 0


def _materialize(tree_kind):
    if tree_kind in NEXT_TREES:
        # `tools.next` imports this module.
        from tools import next as next_lib

        next_lib.materialize()
        if tree_kind == "next":
            return next_lib.NEXT_TREE
        return next_lib.base_worktree()
    if tree_kind == "fork":
        materialize(TREE)
        return TREE
    materialize(BASE_TREE, base_only=True)
    return BASE_TREE


def _fork_tree(fork_kind):
    if fork_kind == "next":
        from tools import next as next_lib

        return next_lib.NEXT_TREE
    return TREE


def _is_current_nightly_base(contents):
    """Whether nightly base results were all run on the base now tagged
    `next` in `build/keras-next` (`NEXT` moves with master)."""
    from tools import next as next_lib

    if not contents or not next_lib.NEXT_TREE.is_dir():
        return None
    tag = f"{next_lib.NEXT_TAG}^{{tree}}"
    return contents == {
        git(next_lib.NEXT_TREE, "rev-parse", tag).stdout.strip()
    }


# The configurations of the whole-suite gate: upstream CI's (JAX on 1
# device, its multi-device tier on 4, the other backends), JAX on 8
# devices and JAX with NNX. Each config's pytest arguments before the
# files.
FULL_CONFIGS = {
    "jax": (),
    "jax-1": (),
    "jax-4": ("-m", "multi_device"),
    "jax-nnx": (),
    "tensorflow": (),
    "torch": (),
    "numpy": (),
}
# The trees of the gate, each fork beside its base: 3.15.1 and the series
# of `patches/`, and the nightly base and the series of `patches-next/`
# (`tools.next`), the latter in the JAX configurations only.
FULL_PAIRS = (("upstream", "fork"), ("next-upstream", "next"))
NEXT_TREES = ("next-upstream", "next")
NEXT_CONFIGS = ("jax", "jax-1", "jax-4", "jax-nnx")
# How many chunks `gate` splits each configuration into: on a 2-core
# machine about 45 minutes or less a chunk (torch's chunk 2, with
# `applications_test.py`, takes about 40), so that a session can stop
# between them.
GATE_CHUNKS = {
    "jax": 1,
    "jax-1": 4,
    "jax-4": 1,
    "jax-nnx": 4,
    "tensorflow": 4,
    "torch": 4,
    "numpy": 1,
}


def full(chunk, tree_kind, config="jax"):
    index, _, total = chunk.partition("/")
    index, total = int(index), int(total)
    if not 1 <= index <= total:
        raise ToolError(f"CHUNK must be i/N with 1 <= i <= N, got {chunk}")
    if config not in FULL_CONFIGS:
        raise ToolError(
            f"CONFIG must be one of {', '.join(FULL_CONFIGS)}, got {config}"
        )
    if tree_kind in NEXT_TREES and config not in NEXT_CONFIGS:
        raise ToolError(
            f"the nightly trees run in {', '.join(NEXT_CONFIGS)} only, "
            f"got CONFIG={config}"
        )
    tree = _materialize(tree_kind)
    files = sorted(
        str(p.relative_to(tree)) for p in (tree / "keras").rglob("*_test.py")
    )
    mine = files[index - 1 :: total]
    print(
        f"{config}, chunk {index}/{total}: {len(mine)} of {len(files)} "
        "test files"
    )
    parallel = [f for f in mine if f not in SERIAL]
    serial = [f for f in mine if f in SERIAL]
    env = _config_env(config, tree, tree)
    extra = list(FULL_CONFIGS[config])
    start = time.monotonic()
    code, failed, counts, _ = run_pytest(
        ["-n", "2", *extra, *parallel], tree, env
    )
    if serial:
        serial_code, serial_failed, serial_counts, _ = run_pytest(
            [*extra, *serial], tree, env
        )
        # 5: nothing collected (the multi-device tier's marker).
        if serial_code != 5:
            code = max(code, serial_code)
        failed |= serial_failed
        for key in counts:
            counts[key] += serial_counts[key]
    counts["seconds"] = round(time.monotonic() - start)
    out = FULL_RESULTS / config / tree_kind / f"chunk-{index}-of-{total}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    # One split per tree and configuration: `compare` reads every chunk.
    for other in out.parent.glob("chunk-*-of-*.txt"):
        if not other.name.endswith(f"-of-{total}.txt"):
            print(f"removing {other}: another split than {total} chunks")
            other.unlink()
    commit = git(tree, "rev-parse", "HEAD").stdout.strip()
    # The tree's content: a later change to commit messages alone keeps it.
    content = git(tree, "rev-parse", "HEAD^{tree}").stdout.strip()
    header = f"# commit {commit}\n# content {content}\n"
    header += f"# date {time.strftime('%Y-%m-%d')}\n"
    header += "".join(f"# {key} {counts[key]}\n" for key in COUNTED)
    out.write_text(header + "".join(f"{t}\n" for t in sorted(failed)))
    print(f"wrote {len(failed)} failing test ids to {out}")
    known_path = KNOWN_FAILURES
    if tree_kind in NEXT_TREES:
        from tools import next as next_lib

        known_path = next_lib.NEXT_KNOWN_FAILURES
    known = read_known_failures(known_path)
    unknown = sorted(t for t in failed if not is_known(config, t, known))
    for test_id in unknown:
        print(f"NOT IN {known_path.name} {test_id}")
    if code not in (0, 1, 5):
        raise ToolError(f"pytest exited with code {code}")
    return 0


def _read_results(folder):
    """The chunks of one tree in one configuration: (chunk names, failed
    ids, counts, commits, dates, contents)."""
    counts = dict.fromkeys(COUNTED, 0)
    failed = set()
    commits = set()
    dates = set()
    contents = set()
    chunks = sorted(Path(folder).glob("chunk-*.txt"))
    for chunk in chunks:
        for line in chunk.read_text().splitlines():
            if line.startswith("# "):
                key, value = line[2:].split()
                if key == "commit":
                    commits.add(value)
                elif key == "date":
                    dates.add(value)
                elif key == "content":
                    contents.add(value)
                else:
                    counts[key] += int(value)
            elif line:
                failed.add(line)
    return {c.name for c in chunks}, failed, counts, commits, dates, contents


def _complete(folder, names=None):
    """Whether `folder` (or the chunk file names `names`) holds every chunk
    i of N for some N."""
    if names is None:
        names = {p.name for p in Path(folder).glob("chunk-*-of-*.txt")}
    totals = {name.split("-of-")[1].split(".")[0] for name in names}
    return any(
        names >= {f"chunk-{i}-of-{n}.txt" for i in range(1, int(n) + 1)}
        for n in totals
    )


def _is_current(commits, contents, tree=None):
    """Whether fork results were all run on the series now in `tree`
    (`TREE` unless given): the same content (commit messages may have
    changed since), or, for results that predate the content line, the
    same commit."""
    tree = TREE if tree is None else tree
    if not tree.is_dir():
        return None
    head = git(tree, "rev-parse", "HEAD").stdout.strip()
    head_content = git(tree, "rev-parse", "HEAD^{tree}").stdout.strip()
    if contents:
        return contents == {head_content}
    return commits == {head}


def _chunk_content(path):
    """The tree content (`HEAD^{tree}`) that a chunk's results name."""
    for line in path.read_text().splitlines():
        if line.startswith("# content "):
            return line.split()[2]
    return None


def _current_content(tree_kind):
    """The tree content that results of `tree_kind` must have run on, or
    `None` for 3.15.1, whose pin does not move."""
    if tree_kind == "upstream":
        return None
    from tools import next as next_lib

    tree = {"fork": TREE, "next": next_lib.NEXT_TREE}.get(tree_kind)
    rev = "HEAD^{tree}"
    if tree_kind == "next-upstream":
        tree, rev = next_lib.NEXT_TREE, f"{next_lib.NEXT_TAG}^{{tree}}"
    if not tree.is_dir():
        raise ToolError(f"{tree} is missing: run `make tree` and `make next`")
    return git(tree, "rev-parse", rev).stdout.strip()


def pending():
    """The runs `(tree, config, chunk)` that the gate lacks, in the order
    `gate` runs them: for each pair of `FULL_PAIRS` and each of its
    configurations, base then fork, the chunks (of `GATE_CHUNKS`) with no
    results or with results run on other content than the tree now
    holds. A tree whose results are a complete split run on its current
    content (any number of chunks) needs none."""
    runs = []
    for base, fork in FULL_PAIRS:
        configs = NEXT_CONFIGS if fork == "next" else FULL_CONFIGS
        for config in configs:
            for kind in (base, fork):
                folder = FULL_RESULTS / config / kind
                want = _current_content(kind)
                current = {
                    p.name
                    for p in folder.glob("chunk-*-of-*.txt")
                    if want in (None, _chunk_content(p))
                }
                if _complete(folder, current):
                    continue
                total = GATE_CHUNKS[config]
                runs += [
                    (kind, config, f"{i}/{total}")
                    for i in range(1, total + 1)
                    if f"chunk-{i}-of-{total}.txt" not in current
                ]
    return runs


def gate(dry_run=False):
    """Runs every chunk of `pending()`, one at a time, then `compare`.
    Each chunk's results are written as it ends, so a stopped gate picks
    up where it was."""
    # The fork's results are current for the series of `patches/`: build
    # `build/keras` from it first if it differs.
    materialize(TREE)
    runs = pending()
    for kind, config, chunk in runs:
        print(f"pending: TREE={kind} CONFIG={config} CHUNK={chunk}")
    if dry_run:
        return 0
    for kind, config, chunk in runs:
        print(f"gate: TREE={kind} CONFIG={config} CHUNK={chunk}", flush=True)
        full(chunk, kind, config)
    return compare()


def compare():
    """Diffs each fork's full-suite failures against its base's
    (`FULL_PAIRS`), in each configuration run whole on both trees, and
    writes them, with their counts, commits and dates, to
    `FULL_SUITE_RESULTS`."""
    runs = [
        (base, fork, config)
        for base, fork in FULL_PAIRS
        for config in (NEXT_CONFIGS if fork == "next" else FULL_CONFIGS)
        if all(_complete(FULL_RESULTS / config / k) for k in (base, fork))
    ]
    if not runs:
        raise ToolError(
            f"no configuration has results for both trees in {FULL_RESULTS}; "
            "run `make test-full TREE=upstream|fork CONFIG=... CHUNK=i/N` "
            "(or TREE=next-upstream|next) first"
        )
    head = git(ROOT, "rev-parse", "--short", "HEAD").stdout.strip()
    lines = [
        "# The whole upstream unit suite, base (keras 3.15.1) vs fork",
        "# (3.15.1 + patches/), same venv, 8 virtual CPU devices unless the",
        "# configuration says otherwise (jax-1: 1 device; jax-4: 4 devices,",
        "# `-m multi_device`, as upstream CI runs them); lines `next-upstream`",
        "# and `next`: the keras-nightly of NEXT (with 3.15.1's test files)",
        "# vs it + patches-next/, in the JAX configurations.",
        "# Regenerate: for each CONFIG, make test-full TREE=upstream and",
        "# TREE=fork CONFIG=... CHUNK=i/N for every i (TREE=next-upstream",
        "# and TREE=next for the nightly), then make compare-full.",
        f"# Written {time.strftime('%Y-%m-%d')} from shardwise {head}.",
    ]
    header_end = len(lines)
    new_total = 0
    known = read_known_failures()
    for base, fork, config in runs:
        results = {
            kind: _read_results(FULL_RESULTS / config / kind)
            for kind in (base, fork)
        }
        nightly = " nightly" if fork == "next" else ""
        if results[base][0] != results[fork][0]:
            print(
                f"note: {config}{nightly}: the two trees ran different chunks"
            )
        new = sorted(results[fork][1] - results[base][1])
        fixed = sorted(results[base][1] - results[fork][1])
        new_total += len(new)
        for test_id in new:
            print(f"[{config}{nightly}] FAILS ONLY ON THE FORK {test_id}")
        for test_id in fixed:
            print(f"[{config}{nightly}] fails only on {base} {test_id}")
        listed = [t for t in new if is_known(config, t, known)]
        summary = (
            f"{config}: {len(results[base][1])} failures on {base}, "
            f"{len(results[fork][1])} on "
            f"{'the fork' if fork == 'fork' else fork}, {len(new)} new"
            + (
                f" ({len(listed)} of them flaky, in known-failures.txt)"
                if listed
                else ""
            )
        )
        print(summary)
        lines.append(f"# {summary}")
        for kind in (base, fork):
            chunks, failed, counts, commits, dates, contents = results[kind]
            numbers = ", ".join(f"{counts[key]} {key}" for key in COUNTED)
            tree_commits = ",".join(sorted(c[:12] for c in commits))
            line = (
                f"{config} {kind}: {len(chunks)} chunks, {numbers}; "
                f"tree {tree_commits or '?'}, run {','.join(sorted(dates))}"
            )
            if kind == fork:
                current = _is_current(commits, contents, _fork_tree(fork))
                if current is not None:
                    line += (
                        "; the current series"
                        if current
                        else "; NOT the current series"
                    )
            elif kind == "next-upstream":
                current = _is_current_nightly_base(contents)
                if current is not None:
                    line += (
                        "; the current nightly"
                        if current
                        else "; NOT the current nightly"
                    )
            lines.append(line)
        for kind in (base, fork):
            lines += [
                f"{config} {kind} FAILED {test_id}"
                for test_id in sorted(results[kind][1])
            ]
    done = {(fork, config) for _, fork, config in runs}
    missing = [c for c in FULL_CONFIGS if ("fork", c) not in done]
    missing_next = [c for c in NEXT_CONFIGS if ("next", c) not in done]
    if missing_next:
        lines.insert(
            header_end,
            "# Not run whole on both nightly trees: " + ", ".join(missing_next),
        )
    if missing:
        lines.insert(
            header_end,
            f"# Not run whole on both trees: {', '.join(missing)}",
        )
    FULL_SUITE_RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {FULL_SUITE_RESULTS.name}")
    return 1 if new_total else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "command", choices=("test", "full", "compare", "gate", "pending")
    )
    parser.add_argument(
        "--tree", choices=("fork", "upstream", *NEXT_TREES), default="fork"
    )
    parser.add_argument("--chunk", default="1/1")
    parser.add_argument("--config", default="jax")
    args = parser.parse_args()
    if args.command == "test":
        return test(args.tree)
    if args.command == "full":
        return full(args.chunk, args.tree, args.config)
    if args.command in ("gate", "pending"):
        return gate(dry_run=args.command == "pending")
    return compare()


if __name__ == "__main__":
    main_wrapper(main)
