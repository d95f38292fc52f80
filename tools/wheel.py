"""Builds the fork's wheel, `dist/keras-3.15.1+shardwise.N-*.whl`, and
the patched keras-hub's, `dist/keras_hub-0.32.0+shardwise.M-*.whl`.

N is the number of patches in the series. With `next_base=True`, the
nightly fork's: `dist/keras_nightly-VERSION+shardwise.N-*.whl`, from
`build/keras-next` (see `tools/next.py`). The version is written by this
tool into a scratch copy of the tree, never by a patch. The harness files
and the test modules are left out, as in the wheels Keras publishes.

Usage: python -m tools.wheel [--verify]
  --verify  also install the wheels, Keras's with requirements.txt, into
            a fresh virtual environment and check that `import keras`
            and keras-hub's metadata report their local versions.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.common import ROOT
from tools.common import TREE
from tools.common import ToolError
from tools.common import main_wrapper
from tools.common import run
from tools.tree import materialize
from tools.upstream import read_pin

DIST = ROOT / "dist"


def local_version(num_patches, pin=None):
    return f"{(pin or read_pin())['version']}+shardwise.{num_patches}"


def build(tree=TREE, dist=DIST, next_base=False):
    """Builds the wheel from the committed tree; returns its path."""
    if next_base:
        from tools import next as next_lib

        tree = next_lib.NEXT_TREE
        names = next_lib.materialize(tree)
        pin = read_pin(next_lib.NEXT_PIN)
    else:
        names = materialize(tree)
        pin = read_pin()
    dist = Path(dist)
    dist.mkdir(exist_ok=True)
    # The wheel's name: the project's name, normalized.
    for old in dist.glob(f"{pin['name'].replace('-', '_')}-*.whl"):
        old.unlink()
    return build_from_tree(tree, len(names), pin, dist)


def drop_harness(src):
    """Removes from the unpacked Keras tree `src` what is for the
    development tree only: the harness, the tests, their fixtures."""
    (src / "conftest.py").unlink()
    (src / "keras" / "__init__.py").unlink()
    for test in src.glob("keras/src/**/*_test.py"):
        test.unlink()
    shutil.rmtree(
        src / "keras" / "src" / "saving" / "test_data", ignore_errors=True
    )


def build_from_tree(
    tree, num_patches, pin, dist, package="keras", drop=drop_harness
):
    """Builds the wheel of `tree`'s HEAD, the base plus `num_patches`
    patches, into the folder `dist`, with the tree's own build backend;
    returns its path. `package` is the import name whose
    `src/version.py` gets the local version; `drop(src)` removes what the
    wheel must not hold from the unpacked tree `src`."""
    version = local_version(num_patches, pin)
    project = pin["name"].replace("-", "_")
    dist = Path(dist)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        archive = subprocess.run(
            ["git", "-C", tree, "archive", "HEAD"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "x", "-C", src], input=archive, check=True)
        drop(src)
        version_file = src / package / "src" / "version.py"
        text = version_file.read_text()
        pinned = f'__version__ = "{pin["version"]}"'
        if pinned not in text:
            raise ToolError(f"{version_file} does not contain `{pinned}`")
        version_file.write_text(
            text.replace(pinned, f'__version__ = "{version}"')
        )
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                dist,
                src,
            ],
            capture=True,
        )
    (wheel,) = dist.glob(f"{project}-{version}-*.whl")
    return wheel


def verify(wheel, requirements=ROOT / "requirements.txt", hub_wheel=None):
    """Installs `wheel` (and `hub_wheel`, without its dependencies) in a
    fresh venv and checks the reported versions."""
    expected = Path(wheel).name.split("-")[1]
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        run([sys.executable, "-m", "venv", venv], capture=True)
        python = venv / "bin" / "python"
        run(
            [python, "-m", "pip", "install", "-q", wheel, "-r", requirements],
            capture=True,
        )
        out = run(
            [
                python,
                "-c",
                "import keras; print(keras.__version__, keras.version())",
            ],
            cwd=tmp,
            # Only the installed wheel may provide `keras`.
            env={"KERAS_BACKEND": "jax", "PYTHONPATH": None},
            capture=True,
        ).stdout.split()
        if out[-2:] != [expected, expected]:
            raise ToolError(
                f"the installed wheel reports {out[-2:]}, expected {expected}"
            )
        if hub_wheel is not None:
            hub_expected = Path(hub_wheel).name.split("-")[1]
            run(
                [python, "-m", "pip", "install", "-q", "--no-deps", hub_wheel],
                capture=True,
            )
            out = run(
                [
                    python,
                    "-c",
                    "from importlib import metadata; "
                    "print(metadata.version('keras-hub'))",
                ],
                cwd=tmp,
                capture=True,
            ).stdout.split()
            if out[-1:] != [hub_expected]:
                raise ToolError(
                    f"the installed keras-hub reports {out[-1:]}, "
                    f"expected {hub_expected}"
                )
    return expected


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verify", action="store_true")
    args = parser.parse_args()
    wheel = build()
    print(f"built {wheel.relative_to(ROOT)}")
    from tools import hub

    hub_wheel = hub.build_wheel(DIST)
    print(f"built {hub_wheel.relative_to(ROOT)}")
    if args.verify:
        version = verify(wheel, hub_wheel=hub_wheel)
        print(
            f"fresh venv: import keras reports {version}, keras-hub "
            f"{hub_wheel.name.split('-')[1]}"
        )


if __name__ == "__main__":
    main_wrapper(main)
