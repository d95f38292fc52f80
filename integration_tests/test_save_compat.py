"""Checkpoints written by the fork load in Keras 3.15.1, and checkpoints
written by 3.15.1 load in the fork: `.weights.h5`, sharded `.weights.json`
and `.keras`, of a model sharded over 8 CPU devices (`compat.py`)."""

import pytest

from integration_tests.conftest import run_in_tree


@pytest.mark.parametrize(
    "writer, reader", [("fork", "upstream"), ("upstream", "fork")]
)
def test_checkpoints_load_across_versions(trees, tmp_path, writer, reader):
    run_in_tree(trees[writer], "compat", "save", tmp_path)
    output = run_in_tree(trees[reader], "compat", "load", tmp_path)
    assert "loaded 3 files" in output
