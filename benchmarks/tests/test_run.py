"""Tests of the runner's floor, figures, table and chart."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import run  # noqa: E402

MIB = 2**20


def test_checkpoint_files_of_a_file_a_sharded_index_and_a_directory(
    tmp_path,
):
    plain = tmp_path / "model.weights.h5"
    plain.write_bytes(b"x")
    assert run.checkpoint_files(plain) == [plain]

    index = tmp_path / "model_sharded.weights.json"
    weight_map = {
        "/layers/a/vars": "model_sharded_00001.weights.h5",
        "/layers/b/vars": "model_sharded_00000.weights.h5",
        "/layers/c/vars": "model_sharded_00000.weights.h5",
        # Keras maps some keys to a list of files.
        "/layers/d/vars": [
            "model_sharded_00001.weights.h5",
            "model_sharded_00002.weights.h5",
        ],
    }
    index.write_text(json.dumps({"weight_map": weight_map}))
    assert run.checkpoint_files(index) == [
        index,
        tmp_path / "model_sharded_00000.weights.h5",
        tmp_path / "model_sharded_00001.weights.h5",
        tmp_path / "model_sharded_00002.weights.h5",
    ]

    preset = tmp_path / "preset"
    (preset / "sub").mkdir(parents=True)
    for name in ("config.json", "model.weights.h5", "sub/part"):
        (preset / name).write_bytes(b"y")
    assert run.checkpoint_files(preset) == [
        preset / "config.json",
        preset / "model.weights.h5",
        preset / "sub" / "part",
    ]


def test_read_floor_reads_every_byte_of_every_file(tmp_path):
    paths = []
    for i, size in enumerate((MIB + 3, 0, 5)):
        path = tmp_path / f"part{i}"
        path.write_bytes(bytes(size))
        paths.append(path)
    num_bytes, seconds = run.read_floor(paths, reads=2)
    assert num_bytes == MIB + 8
    assert seconds > 0


def test_measure_floors_once_per_checkpoint(tmp_path):
    (tmp_path / "a.weights.h5").write_bytes(bytes(1000))
    reads = {"s1": "a.weights.h5", "s2": None, "s3": "a.weights.h5"}
    floors = run.measure_floors(reads, tmp_path)
    assert list(floors) == ["a.weights.h5"]
    assert floors["a.weights.h5"]["bytes"] == 1000
    assert floors["a.weights.h5"]["scenarios"] == ["s1", "s3"]
    assert "a.weights.h5" in run.floor_table(floors)


def runs(wall_s, written=0, config=()):
    memory = {
        "peak_bytes": {"0": 4 * MIB, "1": 2 * MIB},
        "final_bytes": {"0": 2 * MIB, "1": 2 * MIB},
        "rss_increase_bytes": MIB,
        "wall_s": 99.0,
        "written_bytes": written,
        "xla_temp_bytes": 0,
        "num_jit_calls": 0,
    }
    time_runs = [{"wall_s": wall_s, "written_bytes": 0}]
    return {
        "memory": memory,
        "time": time_runs,
        "config": [{"config_s": c} for c in config],
    }


def test_summarize_time_over_floor_and_bytes_written():
    figures = run.summarize(runs(3.0, written=MIB), floor_s=0.5)
    assert figures["time_x_floor"] == 6.0
    assert figures["written_mib"] == 1.0
    assert figures["config_s"] is None
    # `load_model`: the config build is taken out of the time.
    figures = run.summarize(runs(3.0, config=(1.0, 2.0, 1.0)), floor_s=0.5)
    assert figures["config_s"] == 1.0
    assert figures["time_x_floor"] == 4.0
    assert run.summarize(runs(3.0))["time_x_floor"] is None


def test_warm_bytes_is_the_most_a_section_fills_at_most_a_quarter():
    memory_runs = [{"rss_increase_bytes": n * MIB} for n in (3, 1)]
    assert run.warm_bytes(memory_runs, available=100 * MIB) == 3 * MIB
    assert run.warm_bytes(memory_runs, available=8 * MIB) == 2 * MIB
    assert run.warm_bytes([], available=4 * MIB) == 0
    # A section that frees memory lowers the RSS: nothing to write.
    freed = [{"rss_increase_bytes": -MIB}]
    assert run.warm_bytes(freed, available=4 * MIB) == 0
    # At least the checkpoint the section reads, still capped.
    assert run.warm_bytes(memory_runs, 100 * MIB, 5 * MIB) == 5 * MIB
    assert run.warm_bytes(memory_runs, 8 * MIB, 5 * MIB) == 2 * MIB
    assert run.available_bytes() > 0


def test_table_shows_the_new_figures_only_where_they_apply():
    results = {
        "load": {
            "upstream": run.summarize(runs(4.0, written=MIB), floor_s=0.5),
            "fork": run.summarize(runs(2.0), floor_s=0.5),
        },
        "build": {
            "upstream": {"error": "ValueError: no"},
            "fork": run.summarize(runs(1.0)),
        },
    }
    lines = run.table(results).splitlines()
    split = next(i for i, x in enumerate(lines) if x.startswith("build"))
    load, build = lines[1:split], lines[split:]
    assert any(
        "time / floor" in x and x.split()[-3:] == ["8.0", "4.0", "0.50"]
        for x in load
    )
    assert any(
        "bytes written MiB" in x and x.split()[-3:] == ["1.0", "0.0", "0.00"]
        for x in load
    )
    assert not any("config build" in x for x in lines)
    assert "upstream fails" in build[0]
    assert not any("time / floor" in x for x in build)
    assert any("bytes written MiB" in x and "fails" in x for x in build)


def test_chart_writes_a_png(tmp_path):
    results = {
        "load": {
            "upstream": run.summarize(runs(4.0), floor_s=0.5),
            "fork": run.summarize(runs(2.0), floor_s=0.5),
        },
        "build": {
            "upstream": {"error": "ValueError: no"},
            "fork": run.summarize(runs(1.0)),
        },
    }
    run.chart(results, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"


def test_select_default_all_or_a_list():
    assert run.select(None) == list(run.DEFAULT_SCENARIOS)
    assert run.select("all") == list(run.SCENARIOS)
    assert run.select("build_kernels,") == ["build_kernels"]
    # Opt-in scenarios run only when named.
    assert not set(run.OPT_IN_SCENARIOS) & set(run.select("all"))
    assert run.select(run.OPT_IN_SCENARIOS[0]) == [run.OPT_IN_SCENARIOS[0]]
    try:
        run.select("build_kernels,no_such_scenario")
    except run.ToolError as e:
        assert "no_such_scenario" in str(e)
    else:
        raise AssertionError("an unknown scenario must raise")


def test_default_scenarios_and_estimates_cover_the_scenarios():
    assert set(run.DEFAULT_SCENARIOS) <= set(run.SCENARIOS)
    assert set(run.ESTIMATES) == set(run.SCENARIOS)


def test_progress_line_and_time_left(monkeypatch):
    assert run.duration(42.4) == "42 s"
    assert run.duration(185) == "3 min 05 s"
    monkeypatch.setattr(run, "ESTIMATES", {"a": 10, "b": 30, "c": 20})
    # The finished scenarios took twice their estimates: so will the rest;
    # a scenario without an estimate counts as their mean (20).
    assert run.time_left({"a": 20}, ["b", "c"]) == 100
    assert run.time_left({"a": 20, "b": 60}, ["c", "new"]) == 80
    assert run.time_left({"a": 20}, []) == 0
    line = run.progress({"a": 20, "b": 61}, ["c"], elapsed=200)
    assert line == "[2/3] b: 1 min 01 s; 3 min 20 s so far, about 40 s left"


def test_runner_requirements_are_pinned_as_for_the_tests():
    def pins(path):
        lines = (run.ROOT / path).read_text().splitlines()
        return dict(x.split("==") for x in lines if "==" in x)

    runner = pins("benchmarks/requirements-runner.txt")
    tested = pins("requirements-test.txt") | pins("requirements.txt")
    assert runner and {k: tested.get(k) for k in runner} == runner


def test_prepare_writes_only_the_checkpoints_the_scenarios_read(tmp_path):
    # One already written: kept as it is.
    (tmp_path / "embedding.keras").write_text("kept")
    (tmp_path / "embedding.keras.complete").write_text("")
    names = "load_h5_embedding,load_model_embedding,save_h5_embedding"
    result = subprocess.run(
        [
            sys.executable,
            run.HERE / "scenarios.py",
            "prepare",
            "--scenarios",
            names,
            "--data",
            tmp_path,
            "--size",
            "1",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(run.BUILD / "keras")},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "embedding.keras",
        "embedding.keras.complete",
        "embedding.weights.h5",
        "embedding.weights.h5.complete",
    ]
    assert (tmp_path / "embedding.keras").read_text() == "kept"
    assert (tmp_path / "embedding.weights.h5").stat().st_size > 2**20


def test_wheel_digest_ignores_timestamps_only(tmp_path):
    def wheel(name, date_time, text):
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(zipfile.ZipInfo("keras/a.py", date_time), text)
        return path

    digests = [
        run.wheel_digest(wheel(f"{i}.whl", (2026, month, 1, 0, 0, 0), text))
        for i, (month, text) in enumerate([(1, "x"), (2, "x"), (1, "y")])
    ]
    assert digests[0] == digests[1] != digests[2]
