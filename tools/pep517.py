"""The PEP 517 build backend that `pip install` of this repository runs.

`pyproject.toml` names it (`backend-path = ["."]`), so that

    pip install "keras @ git+https://github.com/OWNER/shardwise.git"

builds and installs the fork's wheel, `keras-3.15.1+shardwise.N`, as
`make wheel` does: `build_wheel` downloads the pinned sdist of `UPSTREAM`
with pip, refuses it unless its sha256 is the pinned one, applies
`patches/series` with `git am` and builds the wheel of that tree, without
the harness or the test modules (`tools/wheel.py`). It needs git.

`hub/pyproject.toml` names `build_hub_wheel` the same way, through
`hub/backend.py`, so that

    pip install "keras-hub @ git+https://github.com/OWNER/shardwise.git#subdirectory=hub"

builds `keras_hub-0.32.0+shardwise.N` from the pinned sdist of `KERAS_HUB`
and `patches-hub/series` (`tools/hub.py`).

Everything is built in a temporary folder: nothing is written into the
checkout pip builds from. A verified sdist already in its `cache/` (left
by `make tree`) is read, not downloaded again.
"""

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from unittest import mock

from tools import hub
from tools import upstream
from tools import wheel
from tools.common import CACHE
from tools.common import ROOT
from tools.common import ToolError
from tools.common import read_series
from tools.tree import apply_series
from tools.tree import build_base

# What an sdist of this repository holds: what `build_wheel` reads.
SDIST_FILES = (
    "README.md",
    "UPSTREAM",
    "harness",
    "patches",
    "pyproject.toml",
    "requirements-test.txt",
    "requirements.txt",
    "tools",
)
# The git of the build ignores the user's and the system's configuration
# (commit signing, hooks, templates), as `make tree`'s commits are pinned.
GIT_ISOLATION = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def setuptools_requirement(path=ROOT / "requirements-test.txt"):
    """The setuptools that builds Keras: the version `make venv` pins."""
    for line in Path(path).read_text().splitlines():
        if line.strip().lower().startswith("setuptools=="):
            return line.strip()
    raise ToolError(f"{path} pins no `setuptools==` version")


def get_requires_for_build_wheel(config_settings=None):
    # pip downloads the sdist; setuptools is Keras's own build backend.
    return [setuptools_requirement(), "pip"]


def get_requires_for_build_sdist(config_settings=None):
    return []


def fetch_sdist(scratch, pin=None, cache=None):
    """The verified upstream sdist: the one in `cache` (`cache/` of the
    checkout) if there is one, else a download into `scratch`."""
    pin = pin or upstream.read_pin()
    cache = Path(CACHE if cache is None else cache)
    name = f"{pin['name'].replace('-', '_')}-{pin['version']}.tar.gz"
    if not (cache / name).exists():
        cache = scratch
    return upstream.fetch(pin, cache=cache)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if shutil.which("git") is None:
        raise SystemExit("error: building shardwise's Keras needs git")
    try:
        with (
            tempfile.TemporaryDirectory(prefix="shardwise-") as tmp,
            mock.patch.dict(os.environ, GIT_ISOLATION),
        ):
            sdist = fetch_sdist(Path(tmp) / "cache")
            tree = Path(tmp) / "keras"
            build_base(tree, sdist)
            names = apply_series(tree)
            built = wheel.build_from_tree(
                tree, len(names), upstream.read_pin(), Path(wheel_directory)
            )
    except ToolError as e:
        # One line in pip's output instead of a traceback.
        raise SystemExit(
            f"error: cannot build shardwise's Keras: {e}"
        ) from None
    return built.name


def build_hub_wheel(
    wheel_directory, config_settings=None, metadata_directory=None
):
    if shutil.which("git") is None:
        raise SystemExit("error: building shardwise's keras-hub needs git")
    try:
        with (
            tempfile.TemporaryDirectory(prefix="shardwise-hub-") as tmp,
            mock.patch.dict(os.environ, GIT_ISOLATION),
        ):
            pin = upstream.read_pin(hub.HUB_PIN)
            sdist = fetch_sdist(Path(tmp) / "cache", pin=pin)
            tree = Path(tmp) / "keras-hub"
            hub.build_base(tree, sdist=sdist, with_tests=False)
            names = apply_series(tree, hub.HUB_PATCHES)
            built = hub.build_wheel_from_tree(
                tree, len(names), Path(wheel_directory)
            )
    except ToolError as e:
        raise SystemExit(
            f"error: cannot build shardwise's keras-hub: {e}"
        ) from None
    return built.name


def build_sdist(sdist_directory, config_settings=None):
    """An sdist of this repository, `keras-3.15.1+shardwise.N.tar.gz`:
    the files `build_wheel` needs, and `PKG-INFO`."""
    pin = upstream.read_pin()
    version = wheel.local_version(len(read_series()), pin)
    top = f"{pin['name'].replace('-', '_')}-{version}"
    pkg_info = (
        "Metadata-Version: 2.1\n"
        f"Name: {pin['name']}\n"
        f"Version: {version}\n"
        f"Summary: Keras {pin['version']} with the shardwise patch series\n"
    ).encode()
    path = Path(sdist_directory) / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(f"{top}/PKG-INFO")
        info.size = len(pkg_info)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(pkg_info))
        for name in SDIST_FILES:
            tar.add(ROOT / name, f"{top}/{name}", filter=_sdist_filter)
    return path.name


def _sdist_filter(info):
    if "__pycache__" in info.name or info.name.endswith(".pyc"):
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info
