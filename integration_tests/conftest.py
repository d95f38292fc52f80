"""Runs the integration tests against the materialized tree, build/keras
(or `SHARDWISE_TREE`, such as build/keras-next), with the JAX backend on
8 virtual CPU devices (as `make test` does)."""

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

TREE = Path(
    os.environ.get(
        "SHARDWISE_TREE",
        Path(__file__).resolve().parent.parent / "build" / "keras",
    )
)

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
if str(TREE) not in sys.path:
    sys.path.insert(0, str(TREE))


@pytest.fixture(autouse=True)
def collect_garbage():
    """Frees what earlier tests left in reference cycles (a Keras model and
    its layers are one): its arrays would otherwise stay live until
    Python's cycle collector runs, and the memory sampler walks every live
    array at each line it traces."""
    gc.collect()


@pytest.fixture(scope="module")
def trees():
    """The tree under test and Keras 3.15.1's, materialized beside it."""
    from tools import tree as tree_lib
    from tools.common import BUILD

    upstream = BUILD / "keras-upstream"
    tree_lib.materialize(upstream, base_only=True)
    return {"fork": TREE, "upstream": upstream}


def run_in_tree(tree, module, *args, backend="jax"):
    """Runs `python -m integration_tests.MODULE ARGS` with `tree`'s Keras on
    `backend` (JAX: 8 CPU devices); returns its standard output."""
    root = Path(__file__).resolve().parent.parent
    env = dict(
        os.environ,
        KERAS_BACKEND=backend,
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
        PYTHONPATH=os.pathsep.join([str(tree), str(root)]),
    )
    result = subprocess.run(
        [sys.executable, "-m", f"integration_tests.{module}", *map(str, args)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout
