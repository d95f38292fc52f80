"""Paths and small helpers shared by the shardwise tools."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "cache"
BUILD = ROOT / "build"
TREE = BUILD / "keras"
BASE_TREE = BUILD / "keras-upstream"
PATCHES = ROOT / "patches"
HARNESS = ROOT / "harness"
KNOWN_FAILURES = ROOT / "known-failures.txt"
# The upstream fixtures that the sdist lacks live in the shared folder
# beside the checkout; they are copied into the base of the tree.
TEST_DATA = Path(
    os.environ.get(
        "SHARDWISE_TEST_DATA", ROOT.parent / "shared" / "upstream-test-data"
    )
)

# Identity and dates used for the commits the tooling makes itself, so that
# the base commit of the tree has the same hash on every machine.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "shardwise",
    "GIT_AUTHOR_EMAIL": "shardwise@localhost",
    "GIT_COMMITTER_NAME": "shardwise",
    "GIT_COMMITTER_EMAIL": "shardwise@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}

# The environment every test run uses: the JAX backend on 8 virtual CPU
# devices.
TEST_ENV = {
    "KERAS_BACKEND": "jax",
    "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
    "JAX_PLATFORMS": "cpu",
    "TF_CPP_MIN_LOG_LEVEL": "3",
}


class ToolError(Exception):
    """An error the tools report as one line and exit 1 on."""


def run(args, cwd=None, env=None, check=True, capture=False, input=None):
    """Runs a command; raises `ToolError` naming it if it fails.

    `env` adds to the environment; a variable set to `None` is removed.
    """
    full_env = dict(os.environ)
    full_env.update(env or {})
    # A variable set to `None` is removed from the environment.
    full_env = {k: v for k, v in full_env.items() if v is not None}
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=full_env,
        text=True,
        input=input,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.STDOUT if capture else None,
    )
    if check and result.returncode != 0:
        output = f"\n{result.stdout}" if capture and result.stdout else ""
        raise ToolError(
            f"command failed ({result.returncode}): {' '.join(map(str, args))}"
            f"{output}"
        )
    return result


def git(tree, *args, check=True, capture=True):
    env = dict(GIT_ENV)
    # Commits made by `git am` keep the patch's author; pin the committer
    # date to it so re-applying the series gives the same hashes.
    return run(
        ["git", "-C", tree, *args], env=env, check=check, capture=capture
    )


def read_series(patches_dir=PATCHES):
    """Returns the patch file names listed in `patches_dir/series`."""
    series = Path(patches_dir) / "series"
    if not series.exists():
        return []
    names = []
    for line in series.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line)
    return names


def main_wrapper(main):
    """Runs `main()`, printing a `ToolError` as one line and exiting 1."""
    try:
        sys.exit(main() or 0)
    except ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
