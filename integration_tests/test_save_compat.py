"""Checkpoints written by the fork load in Keras 3.15.1, and checkpoints
written by 3.15.1 load in the fork: `.weights.h5`, sharded `.weights.json`
and `.keras`, of a model sharded over 8 CPU devices (`compat.py`)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(tree, command, folder):
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
        PYTHONPATH=os.pathsep.join([str(tree), str(ROOT)]),
    )
    result = subprocess.run(
        [sys.executable, "-m", "integration_tests.compat", command, folder],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.parametrize(
    "writer, reader", [("fork", "upstream"), ("upstream", "fork")]
)
def test_checkpoints_load_across_versions(trees, tmp_path, writer, reader):
    run(trees[writer], "save", tmp_path)
    assert "loaded 3 files" in run(trees[reader], "load", tmp_path)
