"""Fetches the pinned Keras source distribution and verifies its checksum.

Usage: python -m tools.upstream   (prints the path of the cached sdist)
"""

import hashlib
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from tools.common import CACHE
from tools.common import ROOT
from tools.common import ToolError
from tools.common import main_wrapper
from tools.common import run


def read_pin(path=ROOT / "UPSTREAM"):
    """Returns the `key=value` entries of the `UPSTREAM` file as a dict."""
    pin = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pin[key.strip()] = value.strip()
    for key in ("name", "version", "sha256"):
        if key not in pin:
            raise ToolError(f"{path} has no `{key}=` entry")
    return pin


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path, expected):
    actual = sha256_of(path)
    if actual != expected:
        raise ToolError(
            f"checksum mismatch for {path}: expected sha256 {expected}, got "
            f"{actual}. Refusing to go on; delete the file to download it "
            "again, or fix the pin in UPSTREAM."
        )


def fetch(pin=None, cache=CACHE):
    """Returns the path of the verified sdist, downloading it if needed."""
    pin = pin or read_pin()
    cache = Path(cache)
    # PyPI names sdists with the normalized project name: keras_nightly-....
    filename = f"{pin['name'].replace('-', '_')}-{pin['version']}.tar.gz"
    cached = cache / filename
    if not cached.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    "--no-build-isolation",
                    "--dest",
                    tmp,
                    f"{pin['name']}=={pin['version']}",
                ],
                capture=True,
            )
            downloaded = Path(tmp) / filename
            if not downloaded.exists():
                raise ToolError(f"pip did not download {filename}")
            verify(downloaded, pin["sha256"])
            shutil.move(downloaded, cached)
    verify(cached, pin["sha256"])
    return cached


def unpack(sdist, dest):
    """Unpacks the sdist into `dest`, dropping `PKG-INFO` and `*.egg-info`."""
    dest = Path(dest)
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = Path(tmp).iterdir()
        for item in top.iterdir():
            if item.name == "PKG-INFO" or item.name.endswith(".egg-info"):
                continue
            shutil.move(item, dest / item.name)


def main():
    print(fetch())


if __name__ == "__main__":
    main_wrapper(main)
