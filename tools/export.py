"""Regenerates `patches/` from the commits `upstream..HEAD` of the tree.

The `git format-patch` options are pinned so that exporting the same
commits twice gives byte-identical files.

Usage: python -m tools.export
"""

from pathlib import Path

from tools.common import PATCHES
from tools.common import TREE
from tools.common import ToolError
from tools.common import git
from tools.common import main_wrapper
from tools.tree import BASE_TAG

FORMAT_PATCH_OPTIONS = (
    "--no-numbered",  # "[PATCH]", not "[PATCH n/m]": adding one renames none
    "--zero-commit",  # no commit hash in the "From" line
    "--no-signature",  # no git version at the end
    "--full-index",  # full blob hashes, whatever the repository's size
    "--unified=3",
    "--find-renames",
    "--stat=80",
    "--no-attach",
    "--no-thread",
    "--encoding=UTF-8",
    "--no-notes",
)


def export(tree=TREE, patches_dir=PATCHES, base=BASE_TAG):
    """Writes one file per commit after the tag `base` and the `series`
    file; returns the names."""
    tree, patches_dir = Path(tree), Path(patches_dir)
    if git(tree, "status", "--porcelain").stdout.strip():
        raise ToolError(f"{tree} has uncommitted changes; commit them first")
    patches_dir.mkdir(parents=True, exist_ok=True)
    for old in patches_dir.glob("*.patch"):
        old.unlink()
    out = git(
        tree,
        "-c",
        "core.abbrev=12",
        "-c",
        "diff.noprefix=false",
        "-c",
        "format.headers=",
        "format-patch",
        *FORMAT_PATCH_OPTIONS,
        "-o",
        patches_dir.resolve(),
        f"{base}..HEAD",
    )
    names = [Path(line).name for line in out.stdout.splitlines() if line]
    target = "tree" if base == BASE_TAG else "next"
    series = [f"# Applied in this order by `make {target}`; see the README."]
    (patches_dir / "series").write_text("\n".join(series + names) + "\n")
    return names


def main():
    names = export()
    print(f"exported {len(names)} patches to {PATCHES}")


if __name__ == "__main__":
    main_wrapper(main)
