"""Materializes `build/keras`: the pinned sdist plus the patch series.

The tree is a git repository. Its first commit holds the unpacked sdist,
the harness files from `harness/` and the upstream test fixtures the sdist
lacks; it is tagged `upstream`. Each patch of `patches/series` is then
applied with `git am`, which refuses any patch that needs fuzz.

Usage: python -m tools.tree [--base-only] [DEST]
"""

import argparse
import hashlib
import shutil
from pathlib import Path

from tools import upstream
from tools.common import HARNESS
from tools.common import PATCHES
from tools.common import TEST_DATA
from tools.common import TREE
from tools.common import ToolError
from tools.common import git
from tools.common import main_wrapper
from tools.common import read_series
from tools.common import run

BASE_TAG = "upstream"
FINGERPRINT = "shardwise-base"


def _files_under(folder):
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.is_file())


def base_fingerprint(sdist):
    """Hashes everything that goes into the base commit."""
    digest = hashlib.sha256(upstream.sha256_of(sdist).encode())
    for folder in (HARNESS, TEST_DATA):
        for path in _files_under(folder):
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def build_base(dest, sdist):
    """Creates `dest` as a git repository holding the base, tagged."""
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    upstream.unpack(sdist, dest)
    shutil.copytree(HARNESS, dest, dirs_exist_ok=True)
    if (TEST_DATA / "keras").is_dir():
        shutil.copytree(TEST_DATA / "keras", dest / "keras", dirs_exist_ok=True)
    else:
        print(
            f"note: {TEST_DATA} is missing; the upstream tests that read "
            "its fixtures are skipped."
        )
    git(dest, "init", "-q", "-b", "main")
    git(dest, "config", "user.name", "shardwise")
    git(dest, "config", "user.email", "shardwise@localhost")
    git(dest, "add", "-A", "-f")
    git(dest, "commit", "-q", "-m", "Keras 3.15.1 sdist with the harness")
    git(dest, "tag", BASE_TAG)
    (dest / ".git" / FINGERPRINT).write_text(base_fingerprint(sdist))


def apply_series(tree, patches_dir=PATCHES, names=None):
    """Applies the named patches in order; stops at the first that fails."""
    names = read_series(patches_dir) if names is None else names
    for name in names:
        patch = Path(patches_dir) / name
        if not patch.exists():
            raise ToolError(f"patch {name} is in the series but missing")
        result = git(
            tree,
            "am",
            "-q",
            "--committer-date-is-author-date",
            patch.resolve(),
            check=False,
        )
        if result.returncode != 0:
            git(tree, "am", "--abort", check=False)
            raise ToolError(
                f"patch {name} does not apply without fuzz:\n{result.stdout}"
            )
    return names


def patch_ids(text):
    """Returns the stable patch ids of the patches in `text`, in order."""
    out = run(["git", "patch-id", "--stable"], capture=True, input=text)
    return [line.split()[0] for line in out.stdout.splitlines() if line]


def tree_patch_ids(tree, base=BASE_TAG):
    log = git(tree, "log", "--reverse", "-p", f"{base}..HEAD")
    return patch_ids(log.stdout)


def series_patch_ids(patches_dir=PATCHES):
    ids = []
    for name in read_series(patches_dir):
        path = Path(patches_dir) / name
        if path.exists():
            ids.extend(patch_ids(path.read_text()))
    return ids


def check_safe_to_replace(tree, patches_dir=PATCHES, base=BASE_TAG):
    """Refuses when rebuilding `tree` would lose uncommitted or unexported
    work: the commits after the tag `base` that are not in `patches_dir`.
    Returns True when the tree already matches the series."""
    tree = Path(tree)
    if not tree.exists():
        return False
    tagged = git(tree, "rev-parse", "-q", "--verify", base, check=False)
    if tagged.returncode != 0:
        raise ToolError(
            f"{tree} exists but is not a materialized tree (no `{base}` "
            "tag); move it away first."
        )
    dirty = git(tree, "status", "--porcelain").stdout.strip()
    if dirty:
        raise ToolError(
            f"{tree} has uncommitted changes; commit them and run "
            f"`make patches`, or discard them:\n{dirty}"
        )
    exported = series_patch_ids(patches_dir)
    in_tree = tree_patch_ids(tree, base)
    unexported = [i for i in in_tree if i not in exported]
    if unexported:
        raise ToolError(
            f"{tree} has {len(unexported)} commit(s) that are not in "
            "patches/; run `make patches` first, or drop them."
        )
    return in_tree == exported


def materialize(tree=TREE, patches_dir=PATCHES, base_only=False):
    """Builds `tree` from the sdist and the series unless it is up to date."""
    tree = Path(tree)
    sdist = upstream.fetch()
    in_sync = check_safe_to_replace(tree, patches_dir)
    fingerprint = tree / ".git" / FINGERPRINT
    same_base = (
        fingerprint.exists()
        and fingerprint.read_text() == base_fingerprint(sdist)
    )
    if base_only:
        if same_base and not tree_patch_ids(tree):
            return []
    elif in_sync and same_base:
        names = read_series(patches_dir)
        print(f"{tree} is up to date ({len(names)} patches)")
        return names
    build_base(tree, sdist)
    names = [] if base_only else apply_series(tree, patches_dir)
    print(f"{tree} materialized: upstream + {len(names)} patches")
    return names


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", default=TREE)
    parser.add_argument(
        "--base-only",
        action="store_true",
        help="build the base without applying the series",
    )
    args = parser.parse_args()
    materialize(args.dest, base_only=args.base_only)


if __name__ == "__main__":
    main_wrapper(main)
