"""Fills `build/device/` with what `make device-check` needs on a machine
without network (`make device-wheels`): the wheels of the pure-Python and
small packages that the accelerator machine may lack, for Python 3.12 on
x86-64 Linux, and the two Keras trees (3.15.1 and the fork) without their
git history. Checks that all of it stays under `LIMIT_BYTES`, what one
run of the accelerator machine carries.

On that machine:
  python -m benchmarks.device_check --upstream build/device/upstream \\
      --fork build/device/fork --wheels build/device/wheels --out FILE
"""

import shutil
import sys

from tools.common import BUILD
from tools.common import ToolError
from tools.common import main_wrapper
from tools.common import run

DEVICE = BUILD / "device"
LIMIT_BYTES = 64 * 2**20
# keras and keras-hub's own dependencies (not JAX, NumPy, h5py or
# ml_dtypes, which the machine has), pinned as in requirements*.txt.
WHEELS = [
    "keras-hub==0.32.0",
    "regex==2026.11.19",
    "tokenizers==0.23.3",
    "sentencepiece==0.2.3",
    "absl-py==2.5.1",
    "namex==0.1.0",
    "optree==0.20.0",
    "rich==15.0.0",
    "markdown-it-py==4.3.0",
    "mdurl==0.1.2",
    "Pygments==2.21.0",
    "packaging==26.4",
    "pytest==9.2.0",
    "pluggy==1.7.0",
    "iniconfig==2.3.1",
]
TREES = {"upstream": BUILD / "keras-upstream", "fork": BUILD / "keras"}


def size(path):
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main():
    shutil.rmtree(DEVICE, ignore_errors=True)
    wheels = DEVICE / "wheels"
    run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
        + ["--only-binary=:all:", "--python-version", "3.12"]
        + ["--platform", "manylinux_2_28_x86_64"]
        + ["--platform", "manylinux_2_17_x86_64", "--platform", "any"]
        + ["-d", str(wheels), *WHEELS]
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
