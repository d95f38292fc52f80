"""Keeps the series current with keras master: the pinned keras-nightly sdist.

`build/keras-next` is a git repository in two layers, so that git sees
what master changed since 3.15.1 as one commit, renames included
(`keras/src/backend/jax/core.py` -> `keras/src/backend/jax/ops/core.py`):

- the 3.15.1 base, exactly as in `build/keras`, tagged `upstream`;
- on top of it, the keras-nightly sdist pinned in `NEXT`, tagged `next`.
  The nightly sdist has no test files: 3.15.1's stay, as the best tests
  for master available, and so do the harness and the upstream fixtures.

`patches-next/` holds the series rebased onto `next`, applied with
`git am` like `patches/`.

Usage:
  python -m tools.next tree     materialize build/keras-next (`make next`)
  python -m tools.next status   one line: how each patch of `patches/`
                                applies onto `next` (`make next`)
  python -m tools.next export   write next..HEAD of build/keras-next to
                                patches-next/
  python -m tools.next test     the suites the series touches, on the
                                nightly base and on the nightly fork, on 8
                                devices (`make next-test`): every failure
                                of the base must be in known-failures-next.txt,
                                and the fork must not fail anything else;
                                then integration_tests on the nightly fork
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tools import suite
from tools import tree as tree_lib
from tools import upstream
from tools.common import BUILD
from tools.common import HARNESS
from tools.common import PATCHES
from tools.common import ROOT
from tools.common import TEST_DATA
from tools.common import ToolError
from tools.common import git
from tools.common import main_wrapper
from tools.common import read_series
from tools.common import run
from tools.export import export

NEXT_PIN = ROOT / "NEXT"
NEXT_TREE = BUILD / "keras-next"
NEXT_PATCHES = ROOT / "patches-next"
NEXT_TAG = "next"
# A scratch repository for `status`.
STATUS_TREE = BUILD / "next-status"
# The keras-hub of `NEXT` (`keras_hub=`), installed here for `test`.
NEXT_KERAS_HUB = BUILD / "next-keras-hub"
# The nightly base alone, a worktree of `NEXT_TREE`, for `test`.
NEXT_BASE_TREE = BUILD / "keras-next-base"
# The tests of the nightly base that fail because they are 3.15.1's, older
# than the code: the same format as known-failures.txt.
NEXT_KNOWN_FAILURES = ROOT / "known-failures-next.txt"


def _kept_on_next(path):
    """Whether a file of the 3.15.1 base stays in the `next` layer: the
    test files, which the nightly sdist lacks, the harness and fixtures."""
    if path.endswith("_test.py"):
        return True
    for folder in (HARNESS, TEST_DATA):
        if (folder / path).is_file():
            return True
    return False


def build_next_base(dest):
    """Creates `dest` with the 3.15.1 base (`upstream`) and the nightly on
    top of it (`next`); returns the nightly's version."""
    dest = Path(dest)
    tree_lib.build_base(dest, upstream.fetch())
    pin = upstream.read_pin(NEXT_PIN)
    files = git(dest, "ls-files", "-z").stdout.split("\0")
    for path in files:
        if path and not _kept_on_next(path):
            (dest / path).unlink()
    with tempfile.TemporaryDirectory() as tmp:
        upstream.unpack(upstream.fetch(pin), tmp)
        shutil.copytree(tmp, dest, dirs_exist_ok=True)
    # The harness replaces the sdist's files of the same name.
    shutil.copytree(HARNESS, dest, dirs_exist_ok=True)
    git(dest, "add", "-A", "-f")
    git(
        dest,
        "commit",
        "-q",
        "-m",
        f"{pin['name']} {pin['version']} sdist with 3.15.1's tests and "
        "the harness",
    )
    git(dest, "tag", NEXT_TAG)
    return pin["version"]


def _fingerprint():
    """Hashes everything that goes into the `next` base."""
    pin = upstream.read_pin(NEXT_PIN)
    return tree_lib.base_fingerprint(upstream.fetch()) + pin["sha256"]


def materialize(dest=NEXT_TREE, patches_dir=NEXT_PATCHES):
    """Builds `dest`, the `next` base plus `patches_dir`, unless it is up
    to date; returns the names of the patches."""
    dest = Path(dest)
    in_sync = tree_lib.check_safe_to_replace(dest, patches_dir, base=NEXT_TAG)
    fingerprint = dest / ".git" / "shardwise-next"
    if (
        in_sync
        and fingerprint.exists()
        and fingerprint.read_text() == _fingerprint()
    ):
        return read_series(patches_dir)
    version = build_next_base(dest)
    fingerprint.write_text(_fingerprint())
    names = tree_lib.apply_series(dest, patches_dir)
    print(
        f"{dest} materialized: keras-nightly {version} + {len(names)} patches"
    )
    return names


def _subject(patch):
    """The subject of a patch file, which identifies it across bases."""
    for line in Path(patch).read_text().splitlines():
        if line.startswith("Subject: "):
            return line[len("Subject: ") :].removeprefix("[PATCH] ")
    raise ToolError(f"{patch} has no `Subject:` line")


def status(patches_dir=PATCHES, next_dir=NEXT_PATCHES, scratch=STATUS_TREE):
    """Applies each patch of `patches_dir` onto `next`, after the rebased
    patches before it from `next_dir`, with a rename-aware cherry-pick.

    Returns the nightly's version and, per patch, `(name, state, files,
    rebased)`: state "clean", "conflict" (files: the conflicting ones, or
    git's message when none conflicts, as for a patch that master already
    has) or "not checked" (a patch before it has no rebased version yet);
    `rebased`: whether `next_dir` has the patch.
    """
    scratch = Path(scratch)
    version = build_next_base(scratch)
    git(scratch, "checkout", "-q", "-b", "base-series", tree_lib.BASE_TAG)
    names = tree_lib.apply_series(scratch, patches_dir)
    commits = git(
        scratch, "rev-list", "--reverse", f"{tree_lib.BASE_TAG}..HEAD"
    ).stdout.split()
    rebased = {_subject(Path(next_dir) / n): n for n in read_series(next_dir)}
    git(scratch, "checkout", "-q", "--detach", NEXT_TAG)
    results = []
    blocked = False
    for name, commit in zip(names, commits):
        subject = _subject(Path(patches_dir) / name)
        has_rebased = subject in rebased
        if blocked:
            results.append((name, "not checked", [], has_rebased))
            continue
        start = git(scratch, "rev-parse", "HEAD").stdout.strip()
        picked = git(scratch, "cherry-pick", commit, check=False)
        if picked.returncode == 0:
            results.append((name, "clean", [], has_rebased))
        else:
            conflicts = git(
                scratch, "diff", "--name-only", "--diff-filter=U"
            ).stdout.split() or [
                (picked.stdout.strip().splitlines() or ["cherry-pick failed"])[
                    0
                ]
            ]
            git(scratch, "cherry-pick", "--abort", check=False)
            results.append((name, "conflict", conflicts, has_rebased))
        if has_rebased:
            # Go on from the rebased patch, as `make next` applies it.
            git(scratch, "reset", "-q", "--hard", start)
            tree_lib.apply_series(scratch, next_dir, [rebased[subject]])
        elif results[-1][1] != "clean":
            blocked = True
    shutil.rmtree(scratch, ignore_errors=True)
    return version, results


def status_line(version, results):
    """One line: which patches apply cleanly on `next`, which conflict
    (with their files), and how many `patches-next/` holds."""
    parts = []
    for name, state, files, _ in results:
        number = name[:4]
        if state == "conflict":
            parts.append(f"{number} conflict ({', '.join(files)})")
        else:
            parts.append(f"{number} {state}")
    rebased = sum(1 for *_, has in results if has)
    return (
        f"keras-nightly {version}: "
        + "; ".join(parts)
        + f". patches-next/ has {rebased} of {len(results)}."
    )


def touched_suites(tree, patches_dir=NEXT_PATCHES):
    """The test files beside every file that a patch of `patches_dir`
    changes, and the test files that the patches change, in `tree`."""
    files = set()
    for folder in suite.patched_folders(patches_dir):
        files.update(
            str(p.relative_to(tree))
            for p in Path(tree, folder).glob("*_test.py")
        )
    return sorted(files - set(suite.UNREACHED_TESTS))


def base_worktree():
    """Makes `NEXT_BASE_TREE` a clean worktree of `NEXT_TREE` at the
    nightly base, keeping it if it is one; returns it."""
    if (NEXT_BASE_TREE / ".git").exists():
        head = git(NEXT_BASE_TREE, "rev-parse", "HEAD").stdout.strip()
        tag = git(NEXT_TREE, "rev-parse", f"{NEXT_TAG}^{{commit}}").stdout
        dirty = git(NEXT_BASE_TREE, "status", "--porcelain").stdout.strip()
        if head == tag.strip() and not dirty:
            return NEXT_BASE_TREE
    shutil.rmtree(NEXT_BASE_TREE, ignore_errors=True)
    git(NEXT_TREE, "worktree", "prune")
    git(NEXT_TREE, "worktree", "add", "--detach", NEXT_BASE_TREE, NEXT_TAG)
    return NEXT_BASE_TREE


def test():
    """Runs the suites the series touches on the nightly base and on the
    nightly fork; returns 1 if the base fails a test not listed in
    `NEXT_KNOWN_FAILURES` or the fork fails one that the base passes."""
    materialize()
    base_worktree()
    files = touched_suites(NEXT_TREE)
    known = suite.read_known_failures(NEXT_KNOWN_FAILURES)
    failed = {}
    for kind, tree in (("base", NEXT_BASE_TREE), ("fork", NEXT_TREE)):
        present = [f for f in files if (tree / f).exists()]
        print(f"\n=== jax, nightly {kind}: pytest -n 2 {len(present)} files")
        start = time.monotonic()
        code, failed[kind], counts, _ = suite.run_pytest(
            ["-n", "2", *present], tree, {"KERAS_BACKEND": "jax"}
        )
        print(
            f"nightly {kind}: {counts['passed']} passed, "
            f"{len(failed[kind])} failed, {counts['skipped']} skipped in "
            f"{time.monotonic() - start:.0f} s"
        )
        if code not in (0, 1, 5):
            raise ToolError(f"pytest exited with code {code} on {tree}")
    # The project's own tests, multi-process harness included, against the
    # nightly fork, with a keras-hub that imports on master.
    print("\n=== jax, nightly fork: pytest integration_tests")
    start = time.monotonic()
    keras_hub = upstream.read_pin(NEXT_PIN)["keras_hub"]
    stamp = NEXT_KERAS_HUB / "installed"
    if not stamp.exists() or stamp.read_text() != keras_hub:
        shutil.rmtree(NEXT_KERAS_HUB, ignore_errors=True)
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                NEXT_KERAS_HUB,
                keras_hub,
            ],
            capture=True,
        )
        stamp.write_text(keras_hub)
    env = {
        "SHARDWISE_TREE": str(NEXT_TREE),
        "PYTHONPATH": os.pathsep.join([str(NEXT_KERAS_HUB), str(NEXT_TREE)]),
    }
    code, project_failed, counts, _ = suite.run_pytest(
        ["integration_tests"], ROOT, env
    )
    print(
        f"integration tests: {counts['passed']} passed, "
        f"{len(project_failed)} failed in {time.monotonic() - start:.0f} s"
    )
    if code not in (0, 5):
        project_failed.add(f"integration_tests (pytest exit code {code})")
    unlisted = sorted(
        t for t in failed["base"] if not suite.is_known("jax", t, known)
    )
    new = sorted(failed["fork"] - failed["base"])
    fixed = sorted(failed["base"] - failed["fork"])
    for test_id in unlisted:
        print(f"NOT IN {NEXT_KNOWN_FAILURES.name} {test_id}")
    for test_id in fixed:
        print(f"fails only on the nightly base {test_id}")
    for test_id in new:
        print(f"FAILS ONLY ON THE NIGHTLY FORK {test_id}")
    for test_id in sorted(project_failed):
        print(f"FAILS ON THE NIGHTLY FORK {test_id}")
    print(
        f"summary: {len(failed['base'])} failures on the nightly base "
        f"({len(unlisted)} not listed), {len(failed['fork'])} on the "
        f"nightly fork, {len(new)} new"
    )
    return 1 if unlisted or new or project_failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["tree", "status", "export", "test"])
    args = parser.parse_args()
    if args.command == "tree":
        materialize()
    elif args.command == "status":
        print(status_line(*status()))
    elif args.command == "test":
        return test()
    else:
        names = export(NEXT_TREE, NEXT_PATCHES, base=NEXT_TAG)
        print(f"exported {len(names)} patches to {NEXT_PATCHES}")


if __name__ == "__main__":
    main_wrapper(main)
