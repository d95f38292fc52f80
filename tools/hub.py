"""The keras-hub companion series: `patches-hub/` over keras-hub 0.32.0.

The pinned sdist (`KERAS_HUB`) ships no tests. The base tree gets
upstream's test files, `conftest.py` and test helpers from the commit of
keras-team/keras-hub that `KERAS_HUB` names, read from a local clone
(`KERAS_HUB_REPO`, default: the snapshot at `/work/.mirror`); without
one, the base holds the sdist alone and only the series' own tests run.
The series' patches change only files the sdist has and add their tests
in new files, so they apply either way.

Usage:
  python -m tools.hub tree      build/keras-hub: the sdist, upstream's tests
                                and patches-hub/series (`make tree`)
  python -m tools.hub export    build/keras-hub's commits into patches-hub/
  python -m tools.hub check     each patch in turn: applies, imports,
                                its tests pass with the fork, ruff
"""

import os
import subprocess
import sys
import time
from pathlib import Path

from tools import check_series
from tools import export as export_lib
from tools import tree as tree_lib
from tools import upstream
from tools import wheel as wheel_lib
from tools.common import BUILD
from tools.common import ROOT
from tools.common import TEST_ENV
from tools.common import TREE
from tools.common import ToolError
from tools.common import git
from tools.common import main_wrapper
from tools.common import read_series
from tools.common import run

HUB_PIN = ROOT / "KERAS_HUB"
HUB_TREE = BUILD / "keras-hub"
HUB_PATCHES = ROOT / "patches-hub"
HUB_SCRATCH = BUILD / "check-series-hub"
DEFAULT_REPO = Path("/work/.mirror/keras-team+keras-hub/repo")
# The sdist's `keras_hub/` holds `api/` and `src/`; its wheel moves `api/`
# up. This package file, never packaged, lets the tree import the same
# `keras_hub`.
TREE_INIT = """\
import os

__path__.append(os.path.join(os.path.dirname(__file__), "api"))

from keras_hub.api import *  # noqa: E402, F403
from keras_hub.api import __version__  # noqa: E402, F401

del os
"""


def _test_files(repo, commit):
    """Upstream's test files at `commit`: `*_test.py`, `conftest.py` and
    the folder of test helpers."""
    listed = git(repo, "ls-tree", "-r", "--name-only", commit).stdout
    return [
        path
        for path in listed.splitlines()
        if path == "conftest.py"
        or (path.startswith("keras_hub/src/") and path.endswith("_test.py"))
        or path.startswith("keras_hub/src/tests/")
    ]


def build_base(dest, sdist=None, with_tests=True):
    """Creates `dest` with the pinned sdist (`sdist`, else the one in
    `cache/`, downloaded if needed) and, with `with_tests` and where a clone
    of keras-hub is found, upstream's test files; tags it."""
    pin = upstream.read_pin(HUB_PIN)
    sdist = upstream.fetch(pin) if sdist is None else sdist
    dest = Path(dest)
    if dest.exists():
        subprocess.run(["rm", "-rf", str(dest)], check=True)
    dest.mkdir(parents=True)
    upstream.unpack(sdist, dest)
    (dest / "keras_hub" / "__init__.py").write_text(TREE_INIT)
    repo = Path(os.environ.get("KERAS_HUB_REPO", DEFAULT_REPO))
    commit = pin["tests_commit"]
    found = (
        with_tests
        and repo.exists()
        and git(repo, "cat-file", "-e", commit, check=False).returncode == 0
    )
    if found:
        for path in _test_files(repo, commit):
            if (dest / path).exists():
                continue  # the sdist's own file wins
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(
                subprocess.run(
                    ["git", "-C", str(repo), "show", f"{commit}:{path}"],
                    check=True,
                    capture_output=True,
                ).stdout
            )
        tests = f"upstream's tests from {pin['tests_repo']}@{commit[:12]}"
    elif with_tests:
        print(
            f"note: no clone of {pin['tests_repo']} with {commit[:12]} "
            f"(KERAS_HUB_REPO={repo}); upstream's keras-hub tests are left out"
        )
        tests = "no upstream tests"
    else:
        tests = "no upstream tests"
    git(dest, "init", "-q", "-b", "main")
    git(dest, "config", "user.name", "shardwise")
    git(dest, "config", "user.email", "shardwise@localhost")
    git(dest, "add", "-A", "-f")
    git(
        dest,
        "commit",
        "-q",
        "-m",
        f"keras-hub {pin['version']} sdist with {tests}",
    )
    git(dest, "tag", tree_lib.BASE_TAG)
    return found


def materialize(dest=HUB_TREE, patches_dir=HUB_PATCHES):
    """Builds `dest` from the base and the series, unless it holds commits
    that `patches_dir` lacks."""
    dest = Path(dest)
    if dest.exists():
        tree_lib.check_safe_to_replace(dest, patches_dir)
    build_base(dest)
    names = tree_lib.apply_series(dest, patches_dir)
    print(f"{dest} materialized: keras-hub 0.32.0 + {len(names)} patches")
    return names


def _drop_tree_files(src):
    """The tree's package file and the series' test files: keras-hub's
    sdist, and so its wheel, has no `*_test.py`."""
    (src / "keras_hub" / "__init__.py").unlink()
    for test in src.glob("keras_hub/src/**/*_test.py"):
        test.unlink()


def build_wheel_from_tree(tree, num_patches, dist):
    """Builds the wheel of `tree`'s HEAD, keras-hub 0.32.0 plus
    `num_patches` patches on a base built `with_tests=False`, as
    `keras_hub-0.32.0+shardwise.N-*.whl` into the folder `dist`, with the
    sdist's own build backend; returns its path. It holds what keras-hub's
    own wheel holds, with the patches' changes and without their tests."""
    if (Path(tree) / "conftest.py").exists():
        raise ToolError(f"{tree} holds upstream's tests: build it bare")
    Path(dist).mkdir(parents=True, exist_ok=True)
    return wheel_lib.build_from_tree(
        tree,
        num_patches,
        upstream.read_pin(HUB_PIN),
        dist,
        package="keras_hub",
        drop=_drop_tree_files,
    )


def build_wheel(dist, scratch=HUB_SCRATCH):
    """`make wheel`'s keras-hub: the sdist and `patches-hub/series` in
    `scratch`, then its wheel in `dist`; returns its path."""
    for old in Path(dist).glob("keras_hub-*.whl"):
        old.unlink()
    build_base(scratch, with_tests=False)
    names = tree_lib.apply_series(scratch, HUB_PATCHES)
    return build_wheel_from_tree(scratch, len(names), dist)


def hub_env(keras_tree=TREE):
    """The environment of the hub's tests: the fork's tree first."""
    env = dict(TEST_ENV)
    env["PYTHONPATH"] = str(Path(keras_tree).resolve())
    return env


def check(
    patches_dir=HUB_PATCHES,
    scratch=HUB_SCRATCH,
    keras_tree=TREE,
    run_tests=True,
):
    """Each hub patch in turn on the base: applies, `import keras_hub`
    works, the test classes it adds or changes pass with the fork, ruff
    passes on its Python files. Returns True when all do. With
    `run_tests=False` (`make test`, whose suites run every test file on
    the final tree) the tests are left out."""
    names = read_series(patches_dir)
    print(f"hub series: {len(names)} patches")
    build_base(scratch)
    ok = True
    for name in names:
        start = time.monotonic()
        try:
            tree_lib.apply_series(scratch, patches_dir, [name])
        except ToolError as e:
            print(f"{name}: {e}")
            return False
        results = []
        env = hub_env(keras_tree)
        imported = run(
            [sys.executable, "-c", "import keras_hub"],
            cwd=scratch,
            env=env,
            check=False,
            capture=True,
        )
        if imported.returncode:
            print(f"{name}: import keras_hub FAILED\n{imported.stdout}")
            return False
        files = check_series.touched_files(scratch)
        tests = [
            test
            for f in files
            if f.endswith("_test.py")
            for test in check_series.changed_tests(scratch, f)
        ]
        if tests and run_tests:
            tested = run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
                + ["-n", "2", *tests],
                cwd=scratch,
                env=env,
                check=False,
                capture=True,
            )
            passed = tested.returncode == 0
            ok = ok and passed
            tail = "\n".join(tested.stdout.splitlines()[-15:])
            results.append(
                f"the {len(tests)} test classes it changes pass"
                if passed
                else f"tests FAILED\n{tail}"
            )
        sources = [f for f in files if f.endswith(".py")]
        if sources:
            lint = run(
                [sys.executable, "-m", "ruff", "check", "-q", *sources],
                cwd=scratch,
                check=False,
                capture=True,
            )
            fmt = run(
                [sys.executable, "-m", "ruff", "format", "--check", "-q"]
                + sources,
                cwd=scratch,
                check=False,
                capture=True,
            )
            linted = not (lint.returncode or fmt.returncode)
            ok = ok and linted
            results.append(
                "ruff ok"
                if linted
                else f"ruff FAILED\n{lint.stdout}{fmt.stdout}"
            )
        seconds = time.monotonic() - start
        summary = ", ".join(["applies, imports"] + results)
        print(f"{name}: {summary} ({seconds:.0f} s)", flush=True)
    return ok


def main():
    command = sys.argv[1] if len(sys.argv) > 1 else "tree"
    if command == "tree":
        materialize()
    elif command == "export":
        names = export_lib.export(HUB_TREE, HUB_PATCHES)
        print(f"exported {len(names)} patches to {HUB_PATCHES}")
    elif command == "check":
        return 0 if check() else 1
    else:
        raise ToolError(f"unknown command {command!r}; see `--help`")
    return 0


if __name__ == "__main__":
    if "--help" in sys.argv:
        print(__doc__)
        sys.exit(0)
    main_wrapper(main)
