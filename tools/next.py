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
"""

import argparse
import shutil
import tempfile
from pathlib import Path

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
from tools.export import export

NEXT_PIN = ROOT / "NEXT"
NEXT_TREE = BUILD / "keras-next"
NEXT_PATCHES = ROOT / "patches-next"
NEXT_TAG = "next"
# A scratch repository for `status`.
STATUS_TREE = BUILD / "next-status"


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


def materialize(dest=NEXT_TREE, patches_dir=NEXT_PATCHES):
    """Builds `dest`: the `next` base plus `patches_dir`."""
    dest = Path(dest)
    tree_lib.check_safe_to_replace(dest, patches_dir, base=NEXT_TAG)
    version = build_next_base(dest)
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

    Returns `(name, state, files)` per patch: state "clean", "conflict"
    (with the conflicting files) or "not checked" (a patch before it has
    no rebased version yet); and whether `next_dir` has it.
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
            ).stdout.split()
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["tree", "status", "export"])
    args = parser.parse_args()
    if args.command == "tree":
        materialize()
    elif args.command == "status":
        print(status_line(*status()))
    else:
        names = export(NEXT_TREE, NEXT_PATCHES, base=NEXT_TAG)
        print(f"exported {len(names)} patches to {NEXT_PATCHES}")


if __name__ == "__main__":
    main_wrapper(main)
