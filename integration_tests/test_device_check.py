"""`make device-check` at its tiny size on one CPU device: the same code
that runs full-size on an accelerator writes its table and its JSON."""

import json
import subprocess
import sys

from integration_tests.conftest import TREE
from tools import tree as tree_lib
from tools.common import BUILD

UPSTREAM = BUILD / "keras-upstream"
ROOT = TREE.parent.parent


def test_tiny_check_on_one_cpu_device(tmp_path):
    tree_lib.materialize(UPSTREAM, base_only=True)
    out = tmp_path / "device-check.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.device_check", "--size", "tiny"]
        + ["--upstream", str(UPSTREAM), "--fork", str(TREE)]
        + ["--workdir", str(tmp_path / "work"), "--out", str(out)]
        + ["--budget", "900"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1. from_preset of a" in done.stdout
    results = json.loads(out.read_text())
    load = results["load"]
    assert set(load) == {"3.15.1", "fork", "fork, deferred"}
    for result in load.values():
        assert "error" not in result, result
        assert result["platform"] == "cpu"
        assert result["weights_bytes"] == results["preset_bytes"]
    # 3.15.1 builds with values, then loads: more than the weights. Built
    # without values, the fork holds only what it loads.
    assert load["3.15.1"]["peak_bytes"] > 1.2 * results["preset_bytes"]
    assert load["fork, deferred"]["peak_bytes"] <= results["preset_bytes"]
    assert results["floors"]["file_bytes"] >= results["preset_bytes"]
    assert len(results["init"]) == 4
    for result in results["init"].values():
        assert "error" not in result, result
        assert result["compilations"] >= 1
        assert 0 < result["compile_seconds"] < result["seconds"]
    assert results["tests"]["counts"]["passed"] >= 1
