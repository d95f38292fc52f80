"""Checks the patch series: complete, ordered, bisectable and lint-clean.

For the series file: every entry exists, no entry is duplicated, and no
patch file is left out of it. Then, on a scratch tree built from the base,
each patch in turn must apply without fuzz, after which `import keras` must
work, the test classes the patch adds or changes must pass on 8 devices
(the whole test files run on the final tree in `make test`), ruff
(with the tree's own `pyproject.toml`) must pass on the Python files it
touches, and `keras/api` must be what `tools/api_gen.py` generates from
the tree (checked after the patches that change a `keras_export` call or
`keras/api`, the only inputs of the generated API). Then each fix-tier
patch is checked the same way as a pull request taken alone: on the base
with only the patches it needs (`FIX_TIER_NEEDS`), where that differs
from the patches before it. Prints one line per patch and check.

Usage: python -m tools.check_series
"""

import ast
import re
import sys
import time
from collections import Counter
from pathlib import Path

from tools import api_gen
from tools import upstream
from tools.common import BUILD
from tools.common import PATCHES
from tools.common import TEST_ENV
from tools.common import ToolError
from tools.common import git
from tools.common import main_wrapper
from tools.common import read_series
from tools.common import run
from tools.tree import BASE_TAG
from tools.tree import apply_series
from tools.tree import build_base

SCRATCH = BUILD / "check-series"

# What each fix-tier patch uses from earlier ones (docs/series.md,
# "needs"): sent alone, a pull request goes onto the base with these.
FIX_TIER_NEEDS = {
    "0001": (),
    "0002": ("0001",),
    "0003": ("0002",),
    "0004": ("0003",),
    "0005": (),
    "0006": (),
    "0007": (),
    "0008": (),
    "0009": ("0003",),
    "0010": ("0002", "0007"),
    "0011": (),
}


def needed(number, needs=None):
    """The numbers of the patches `number` needs, directly or through
    another, in series order."""
    needs = FIX_TIER_NEEDS if needs is None else needs
    found = set()
    todo = list(needs[number])
    while todo:
        other = todo.pop()
        if other not in found:
            found.add(other)
            todo.extend(needs[other])
    return sorted(found)


def series_problems(patches_dir=PATCHES):
    """Returns a list of problems with the series file itself."""
    patches_dir = Path(patches_dir)
    names = read_series(patches_dir)
    problems = []
    for name, count in Counter(names).items():
        if count > 1:
            problems.append(f"{name} is listed {count} times")
    for name in names:
        if not (patches_dir / name).exists():
            problems.append(f"{name} is listed but does not exist")
    for path in sorted(patches_dir.glob("*.patch")):
        if path.name not in names:
            problems.append(f"{path.name} is not listed in the series")
    return problems


def touched_files(tree):
    """Files changed by the commit at HEAD that still exist."""
    out = git(tree, "diff", "--name-only", "HEAD~1", "HEAD").stdout
    return [f for f in out.splitlines() if (Path(tree) / f).exists()]


def changed_tests(tree, path, base="HEAD~1"):
    """The pytest node ids of the test classes and module-level test
    functions of `path` (relative to `tree`) that the commits from `base`
    to HEAD add or change: those whose lines their diff touches."""
    diff = git(tree, "diff", "-U0", base, "HEAD", "--", path).stdout
    lines = set()
    for match in re.finditer(r"^@@ -\S+ \+(\d+)(?:,(\d+))? @@", diff, re.M):
        start, count = int(match[1]), int(match[2] or 1)
        # A pure deletion (count 0) touches the line it follows.
        lines.update(range(start, start + max(count, 1)))
    ids = []
    for node in ast.parse((Path(tree) / path).read_text()).body:
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            continue
        if not node.name.startswith(("test", "Test")) and not (
            isinstance(node, ast.ClassDef)
            and node.name.endswith(("Test", "Tests"))
        ):
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        if lines & set(range(first, node.end_lineno + 1)):
            ids.append(f"{path}::{node.name}")
    return ids


def changes_exports(tree):
    """Whether the commit at HEAD can change the generated API: it touches
    a `keras_export` call or `keras/api` (renames count as a deletion and
    an addition)."""
    diff = git(tree, "diff", "--no-renames", "HEAD~1", "HEAD").stdout
    return "keras_export" in diff or "a/keras/api/" in diff


def check_patch(tree, name, run_tests=True):
    """Checks the patch at HEAD of `tree`; returns (ok, summary). With
    `run_tests=False` its test files are left to the caller."""
    python = sys.executable
    files = touched_files(tree)
    results = []
    ok = True
    test_files = [f for f in files if f.endswith("_test.py")]
    tests = [t for f in test_files for t in changed_tests(tree, f)]
    if not tests or not run_tests:
        # Otherwise the tests import keras: a failed import fails them.
        imported = run(
            [python, "-c", "import keras"],
            cwd=tree,
            env=TEST_ENV,
            check=False,
            capture=True,
        )
        if imported.returncode != 0:
            return False, f"import keras FAILED\n{imported.stdout}"
        results.append("import ok")
    if test_files and not run_tests:
        results.append(f"{len(test_files)} test files left to the suites")
    elif tests:
        tested = run(
            [
                python,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-o",
                "addopts=",
                # One process: two xdist workers each import Keras and JAX
                # again, which costs more than the few classes save.
                "-n",
                "0",
                *tests,
            ],
            cwd=tree,
            env=TEST_ENV,
            check=False,
            capture=True,
        )
        if tested.returncode == 0:
            results.append(
                f"imports, the {len(tests)} test classes it changes pass"
            )
        else:
            ok = False
            tail = "\n".join(tested.stdout.splitlines()[-15:])
            results.append(f"tests FAILED\n{tail}")
    else:
        results.append("no tests changed")
    sources = [f for f in files if f.endswith(".py")]
    if sources:
        config = ["--config", "pyproject.toml"]
        lint = run(
            [python, "-m", "ruff", "check", "-q", *config, *sources],
            cwd=tree,
            check=False,
            capture=True,
        )
        fmt = run(
            [
                python,
                "-m",
                "ruff",
                "format",
                "--check",
                "-q",
                *config,
                *sources,
            ],
            cwd=tree,
            check=False,
            capture=True,
        )
        if lint.returncode or fmt.returncode:
            ok = False
            results.append(f"ruff FAILED\n{lint.stdout}{fmt.stdout}")
        else:
            results.append("ruff ok")
    if not changes_exports(tree):
        results.append("no export touched")
        return ok, ", ".join(results)
    differ = api_gen.differences(tree)
    if differ:
        ok = False
        listed = "\n".join(f"  keras/api/{name}" for name in differ)
        results.append(
            "keras/api differs from the generated API (run `python -m "
            f"tools.api_gen build/keras` and amend):\n{listed}"
        )
    else:
        results.append("api ok")
    return ok, ", ".join(results)


def check(patches_dir=PATCHES, scratch=SCRATCH, run_tests=True):
    """Runs every check; returns True when all pass. With
    `run_tests=False` (`make test`, whose suites run every test file on the
    final tree) each patch is applied, imported and linted but its tests
    are not run."""
    problems = series_problems(patches_dir)
    names = read_series(patches_dir)
    if problems:
        for problem in problems:
            print(f"series: {problem}")
        return False
    print(f"series: {len(names)} patches, all present, none unlisted")
    build_base(scratch, upstream.fetch())
    all_ok = True
    for name in names:
        start = time.monotonic()
        try:
            apply_series(scratch, patches_dir, [name])
        except ToolError as e:
            print(f"{name}: {e}")
            return False
        ok, summary = check_patch(scratch, name, run_tests=run_tests)
        all_ok = all_ok and ok
        seconds = time.monotonic() - start
        print(f"{name}: applies, {summary} ({seconds:.0f} s)", flush=True)
    return check_alone(patches_dir, scratch, run_tests=run_tests) and all_ok


def check_alone(
    patches_dir=PATCHES, scratch=SCRATCH, base=BASE_TAG, run_tests=True
):
    """Checks each fix-tier patch on the tag `base` of `scratch` with only
    the patches it needs; returns True when all pass."""
    names = read_series(patches_dir)
    by_number = {name[:4]: name for name in names}
    all_ok = True
    for position, name in enumerate(names):
        number = name[:4]
        if number not in FIX_TIER_NEEDS:
            continue
        needs = needed(number)
        if needs == [n[:4] for n in names[:position]]:
            # Alone is the series up to here: checked above.
            continue
        start = time.monotonic()
        git(scratch, "checkout", "-q", "--detach", base)
        git(scratch, "clean", "-qfdx")
        try:
            apply_series(
                scratch,
                patches_dir,
                [by_number[n] for n in needs] + [name],
            )
        except ToolError as e:
            print(f"{name} alone: {e}")
            all_ok = False
            continue
        ok, summary = check_patch(scratch, name, run_tests=run_tests)
        all_ok = all_ok and ok
        seconds = time.monotonic() - start
        on = " + ".join([base, *needs])
        print(
            f"{name} alone, on {on}: applies, {summary} ({seconds:.0f} s)",
            flush=True,
        )
    return all_ok


def check_next_alone():
    """`check_alone()` for `patches-next/` on the nightly base."""
    # Avoid circular imports: `tools.next` imports `tools.suite`.
    from tools import next as next_lib

    scratch = BUILD / "check-series-next"
    next_lib.build_next_base(scratch)
    print(f"patches-next: each fix-tier patch alone on {next_lib.NEXT_TAG}")
    return check_alone(next_lib.NEXT_PATCHES, scratch, next_lib.NEXT_TAG)


def main():
    ok = check()
    return 0 if check_next_alone() and ok else 1


if __name__ == "__main__":
    main_wrapper(main)
