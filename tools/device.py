"""Fills `build/device/` with what `make device-check` needs on a machine
without network (`make device-wheels`): the wheels of the pure-Python and
small packages that the accelerator machine may lack, for x86-64 Linux
and the machine's Python (`PYTHON_VERSION`: 3.11, the TPU machine's,
unless set; 3.12 on the GPU machine), and the two Keras trees (3.15.1
and the fork) without their git history. Checks that all of it stays under
`LIMIT_BYTES`, what one run of the accelerator machine carries.

On that machine:
  python -m benchmarks.device_check --upstream build/device/upstream \\
      --fork build/device/fork --wheels build/device/wheels --out FILE
"""

import os
import shutil
import sys

from tools.common import BUILD
from tools.common import ROOT
from tools.common import ToolError
from tools.common import main_wrapper
from tools.common import run

DEVICE = BUILD / "device"
LIMIT_BYTES = 64 * 2**20
# keras and keras-hub's own dependencies (not JAX, NumPy or ml_dtypes,
# which the machine has; h5py, which the TPU machine lacks), and pytest, at
# the versions that requirements.txt and requirements-test.txt pin.
WHEELS = [
    "keras-hub",
    "h5py",
    "regex",
    "tokenizers",
    "sentencepiece",
    "absl-py",
    "namex",
    "optree",
    "rich",
    "markdown-it-py",
    "mdurl",
    "pygments",
    "packaging",
    "pytest",
    "pluggy",
    "iniconfig",
]
TREES = {"upstream": BUILD / "keras-upstream", "fork": BUILD / "keras"}


def pinned(names):
    """The requirement lines of `names` in the repository's pin files."""
    pins = {}
    for file in ("requirements.txt", "requirements-test.txt"):
        for line in (ROOT / file).read_text().splitlines():
            name, _, version = line.partition("==")
            if version:
                pins[name.strip().lower()] = line.strip()
    missing = [n for n in names if n not in pins]
    if missing:
        raise ToolError(f"not pinned in the requirements files: {missing}")
    return [pins[n] for n in names]


def size(path):
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main():
    python_version = os.environ.get("PYTHON_VERSION") or "3.11"
    shutil.rmtree(DEVICE, ignore_errors=True)
    wheels = DEVICE / "wheels"
    run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
        + ["--only-binary=:all:", "--python-version", python_version]
        + ["--platform", "manylinux_2_28_x86_64"]
        + ["--platform", "manylinux_2_17_x86_64", "--platform", "any"]
        + ["-d", str(wheels), *pinned(WHEELS)]
    )
    for name, tree in TREES.items():
        if not (tree / "keras").is_dir():
            raise ToolError(f"{tree} is missing: run `make tree` first")
        shutil.copytree(
            tree / "keras",
            DEVICE / name / "keras",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        for extra in ("conftest.py", "pyproject.toml"):
            shutil.copy(tree / extra, DEVICE / name / extra)
    total = size(DEVICE)
    print(f"{DEVICE}: {total / 2**20:.1f} MiB (limit {LIMIT_BYTES >> 20})")
    if total > LIMIT_BYTES:
        raise ToolError(f"{DEVICE} is over {LIMIT_BYTES >> 20} MiB")
    return 0


if __name__ == "__main__":
    main_wrapper(main)
