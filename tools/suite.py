"""Runs the test suites against the materialized tree.

`test` (the README's test command) first checks the series (see
`check_series.py`), then runs, with the JAX backend on 8 virtual CPU
devices:
  1. upstream's multi-device tier over the whole unit suite
     (`pytest keras -m multi_device`);
  2. the upstream suites the fork touches: the fixed list `SUITES` plus the
     folder of every file a patch changes;
  3. the project's own tests (`tools/tests`, `integration_tests`), on the
     fork only.
Failures listed in `known-failures.txt` are tolerated, on the base tree and
on the fork alike; any other failure fails the run.

`full --chunk i/N` runs one deterministic chunk of the whole upstream unit
suite and writes its failing test ids to `build/full/TREE/`; `compare` diffs
the fork's failures against the base's.

Usage: python -m tools.suite test|full|compare [--tree fork|upstream]
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from tools import check_series
from tools.common import BASE_TREE
from tools.common import BUILD
from tools.common import KNOWN_FAILURES
from tools.common import PATCHES
from tools.common import ROOT
from tools.common import TEST_ENV
from tools.common import TREE
from tools.common import ToolError
from tools.common import main_wrapper
from tools.common import read_series
from tools.tree import materialize

# The upstream suites that the fork's patches are about.
SUITES = (
    "keras/src/backend",
    "keras/src/distribution",
    "keras/src/initializers",
    "keras/src/saving",
    "keras/src/layers/core",
    "keras/src/optimizers",
    "keras/src/models",
)
PROJECT_TESTS = ("tools/tests", "benchmarks/tests", "integration_tests")
FULL_RESULTS = BUILD / "full"
# Test modules whose test ids contain memory addresses, which differ between
# pytest-xdist workers; they run in a separate pytest process without xdist.
SERIAL = ("keras/src/wrappers/sklearn_test.py",)
PYTEST = (
    "-m",
    "pytest",
    "-q",
    "-rfE",
    "-p",
    "no:cacheprovider",
    "-o",
    "addopts=",
)
OUTCOMES = ("passed", "failed", "skipped", "errors", "error", "deselected")


def read_known_failures(path=KNOWN_FAILURES):
    """Returns {test id: reason} from the known-failures file."""
    known = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        test_id, _, reason = line.partition(" # ")
        if not reason.strip():
            raise ToolError(f"{path}: no reason given for {test_id}")
        known[test_id.strip()] = reason.strip()
    return known


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
    outcome counts)."""
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
    counts = dict.fromkeys(OUTCOMES, 0)
    last = ""
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        match = re.match(r"(FAILED|ERROR) (\S+\.py\S*)", line)
        if match:
            # Memory addresses in parametrized ids differ from run to run.
            failed.add(re.sub(r"0x[0-9a-f]+", "0x", match.group(2)))
        if line.strip():
            last = line
    proc.wait()
    for number, outcome in re.findall(r"(\d+) (\w+)", last):
        if outcome in counts:
            counts[outcome] += int(number)
    counts["errors"] += counts.pop("error")
    return proc.returncode, failed, counts


def test(tree_kind="fork"):
    tree = _materialize(tree_kind)
    known = read_known_failures()
    folders = set(SUITES) | set(patched_folders())
    # Leave out folders inside another one: pytest would collect them twice.
    suites = sorted(
        f for f in folders if not any(f.startswith(f"{g}/") for g in folders)
    )
    stages = [
        ("multi-device tier", tree, ["keras", "-m", "multi_device"], {}),
        ("touched suites", tree, ["-n", "2", *suites], {}),
    ]
    if tree_kind == "fork":
        stages.append(
            (
                "project tests",
                ROOT,
                list(PROJECT_TESTS),
                {"PYTHONPATH": str(tree)},
            ),
        )
    totals = dict.fromkeys(("passed", "failed", "skipped", "errors"), 0)
    all_failed = set()
    broken = []
    if tree_kind == "fork":
        print("\n=== series check: each patch applies, imports, passes, lints")
        if not check_series.check():
            broken.append("the series check failed")
    for title, cwd, args, env in stages:
        print(f"\n=== {title}: pytest {' '.join(args)}", flush=True)
        code, failed, counts = run_pytest(args, cwd, env)
        # 0: all passed, 1: some failed, 5: nothing collected.
        if code not in (0, 1, 5) or (code == 1 and not failed):
            broken.append(f"{title} exited with code {code}")
        all_failed |= failed
        for key in totals:
            totals[key] += counts[key]
    unexpected = sorted(all_failed - set(known))
    seen_known = sorted(all_failed & set(known))
    print(f"\n=== summary ({tree_kind} tree: {tree})")
    print(f"known failures seen: {len(seen_known)} of {len(known)} listed")
    for test_id in unexpected:
        print(f"UNEXPECTED FAILURE {test_id}")
    for problem in broken:
        print(f"BROKEN RUN {problem}")
    print(
        f"summary: {totals['passed']} passed, {len(unexpected)} failed, "
        f"{totals['skipped']} skipped"
    )
    return 1 if unexpected or broken else 0


def _materialize(tree_kind):
    if tree_kind == "fork":
        materialize(TREE)
        return TREE
    materialize(BASE_TREE, base_only=True)
    return BASE_TREE


def full(chunk, tree_kind):
    index, _, total = chunk.partition("/")
    index, total = int(index), int(total)
    if not 1 <= index <= total:
        raise ToolError(f"CHUNK must be i/N with 1 <= i <= N, got {chunk}")
    tree = _materialize(tree_kind)
    files = sorted(
        str(p.relative_to(tree)) for p in (tree / "keras").rglob("*_test.py")
    )
    mine = files[index - 1 :: total]
    print(f"chunk {index}/{total}: {len(mine)} of {len(files)} test files")
    parallel = [f for f in mine if f not in SERIAL]
    serial = [f for f in mine if f in SERIAL]
    code, failed, _ = run_pytest(["-n", "2", *parallel], tree)
    if serial:
        serial_code, serial_failed, _ = run_pytest(serial, tree)
        code = max(code, serial_code)
        failed |= serial_failed
    out = FULL_RESULTS / tree_kind / f"chunk-{index}-of-{total}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{t}\n" for t in sorted(failed)))
    print(f"wrote {len(failed)} failing test ids to {out}")
    unknown = sorted(failed - set(read_known_failures()))
    for test_id in unknown:
        print(f"NOT IN known-failures.txt {test_id}")
    if code not in (0, 1, 5):
        raise ToolError(f"pytest exited with code {code}")
    return 0


def compare():
    results = {}
    for kind in ("upstream", "fork"):
        chunks = sorted((FULL_RESULTS / kind).glob("chunk-*.txt"))
        if not chunks:
            raise ToolError(
                f"no results in {FULL_RESULTS / kind}; run "
                f"`make test-full TREE={kind} CHUNK=i/N` first"
            )
        results[kind] = (
            {c.name for c in chunks},
            {t for c in chunks for t in c.read_text().split()},
        )
    if results["upstream"][0] != results["fork"][0]:
        print("note: the two trees were run with different chunks")
    new = sorted(results["fork"][1] - results["upstream"][1])
    fixed = sorted(results["upstream"][1] - results["fork"][1])
    for test_id in new:
        print(f"FAILS ONLY ON THE FORK {test_id}")
    for test_id in fixed:
        print(f"fails only on upstream {test_id}")
    print(
        f"{len(results['upstream'][1])} failures on upstream, "
        f"{len(results['fork'][1])} on the fork, {len(new)} new"
    )
    return 1 if new else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("test", "full", "compare"))
    parser.add_argument("--tree", choices=("fork", "upstream"), default="fork")
    parser.add_argument("--chunk", default="1/1")
    args = parser.parse_args()
    if args.command == "test":
        return test(args.tree)
    if args.command == "full":
        return full(args.chunk, args.tree)
    return compare()


if __name__ == "__main__":
    main_wrapper(main)
