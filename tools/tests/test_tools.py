"""Tests of the series tooling, on scratch trees in temporary folders."""

import re
import shutil
from pathlib import Path

import pytest

from tools import api_gen
from tools import check_series
from tools import export
from tools import hub
from tools import next as next_lib
from tools import suite
from tools import tree
from tools import upstream
from tools.common import PATCHES
from tools.common import ToolError
from tools.common import git
from tools.common import read_series


@pytest.fixture(scope="module")
def sdist():
    return upstream.fetch()


@pytest.fixture
def base(tmp_path, sdist):
    dest = tmp_path / "keras"
    tree.build_base(dest, sdist)
    return dest


def commit_change(dest, path, text, message="Change a file."):
    (dest / path).write_text(text)
    git(dest, "add", path)
    git(dest, "commit", "-q", "-m", message)


def test_checksum_mismatch_stops_the_build(tmp_path, sdist):
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(sdist, cache / sdist.name)
    pin = dict(upstream.read_pin(), sha256="0" * 64)
    with pytest.raises(ToolError, match="checksum mismatch"):
        upstream.fetch(pin, cache=cache)


def test_corrupt_cached_sdist_is_refused(tmp_path, sdist):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / sdist.name).write_bytes(sdist.read_bytes()[:-1])
    with pytest.raises(ToolError, match="checksum mismatch"):
        upstream.fetch(cache=cache)


def test_base_is_tagged_and_has_harness_without_sdist_metadata(base):
    assert (base / "conftest.py").exists()
    assert (base / "keras" / "__init__.py").exists()
    assert not (base / "PKG-INFO").exists()
    assert not list(base.glob("*.egg-info"))
    assert git(base, "status", "--porcelain").stdout == ""
    assert (
        git(base, "rev-parse", "upstream").stdout
        == git(base, "rev-parse", "HEAD").stdout
    )


def test_base_commit_is_reproducible(base, tmp_path, sdist):
    other = tmp_path / "other"
    tree.build_base(other, sdist)
    assert (
        git(base, "rev-parse", "HEAD").stdout
        == git(other, "rev-parse", "HEAD").stdout
    )


def test_broken_patch_is_reported_by_name(base, tmp_path):
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "0001-Broken.patch").write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 "
        "2001\nFrom: A <a@b>\nDate: Sat, 1 Jan 2000 00:00:00 +0000\n"
        "Subject: [PATCH] Broken.\n\n---\n"
        "diff --git a/README.md b/README.md\n--- a/README.md\n"
        "+++ b/README.md\n@@ -1,3 +1,3 @@\n-no such line\n+new line\n"
        " nor this\n nor that\n"
    )
    (patches / "series").write_text("0001-Broken.patch\n")
    with pytest.raises(ToolError, match="0001-Broken.patch does not apply"):
        tree.apply_series(base, patches)
    assert git(base, "status", "--porcelain").stdout == ""


def test_export_is_stable_and_round_trips(base, tmp_path, sdist):
    commit_change(base, "README.md", "Changed.\n", "Change `README.md`.")
    commit_change(base, "LICENSE", "Changed too.\n", "Change `LICENSE`.")
    patches = tmp_path / "patches"
    names = export.export(base, patches)
    assert names == ["0001-Change-README.md.patch", "0002-Change-LICENSE.patch"]
    first = {p.name: p.read_bytes() for p in patches.iterdir()}
    export.export(base, patches)
    assert {p.name: p.read_bytes() for p in patches.iterdir()} == first
    # Rebuilding the tree from the exported series gives the same commits.
    rebuilt = tmp_path / "rebuilt"
    tree.build_base(rebuilt, sdist)
    tree.apply_series(rebuilt, patches)
    assert (
        git(rebuilt, "rev-parse", "HEAD").stdout
        == git(base, "rev-parse", "HEAD").stdout
    )
    export.export(rebuilt, patches)
    assert {p.name: p.read_bytes() for p in patches.iterdir()} == first


def test_materialize_refuses_to_lose_work(base, tmp_path):
    patches = tmp_path / "patches"
    patches.mkdir()
    (base / "README.md").write_text("Uncommitted.\n")
    with pytest.raises(ToolError, match="uncommitted changes"):
        tree.materialize(base, patches)
    git(base, "commit", "-q", "-am", "Unexported.")
    with pytest.raises(ToolError, match="not in patches/"):
        tree.materialize(base, patches)
    export.export(base, patches)
    # Once exported, the tree is in sync and is left as it is.
    head = git(base, "rev-parse", "HEAD").stdout
    assert tree.materialize(base, patches) == ["0001-Unexported.patch"]
    assert git(base, "rev-parse", "HEAD").stdout == head


def test_series_problems_are_listed(tmp_path):
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "0001-a.patch").write_text("")
    (patches / "0002-b.patch").write_text("")
    (patches / "series").write_text("0001-a.patch\n0001-a.patch\n0003-c\n")
    problems = check_series.series_problems(patches)
    assert "0001-a.patch is listed 2 times" in problems
    assert "0003-c is listed but does not exist" in problems
    assert "0002-b.patch is not listed in the series" in problems


def test_check_series_reports_lint_failure_by_patch(base, tmp_path, capsys):
    commit_change(
        base,
        "keras/src/utils/shardwise_check.py",
        "import os\nimport sys\nx=1\n",
        "Add a badly formatted module.",
    )
    patches = tmp_path / "patches"
    export.export(base, patches)
    assert not check_series.check(patches, scratch=tmp_path / "scratch")
    out = capsys.readouterr().out
    assert "0001-Add-a-badly-formatted-module.patch: applies" in out
    assert "import ok" in out
    assert "ruff FAILED" in out


def test_check_alone_applies_each_fix_with_only_what_it_needs(
    base, tmp_path, capsys, monkeypatch
):
    module = "keras/src/utils/shardwise_check.py"
    commit_change(base, module, "A = 1\n", "Add a module.")
    commit_change(base, "keras/src/utils/shardwise_other.py", "B = 2\n")
    commit_change(base, module, "A = 3\n", "Change the module.")
    patches = tmp_path / "patches"
    export.export(base, patches)
    scratch = tmp_path / "scratch"
    tree.build_base(scratch, upstream.fetch())
    # 0002 stands alone; 0003 changes what 0001 adds.
    needs = {"0001": (), "0002": (), "0003": ("0001",)}
    monkeypatch.setattr(check_series, "FIX_TIER_NEEDS", needs)
    assert check_series.needed("0003") == ["0001"]
    assert check_series.check_alone(patches, scratch, run_tests=False)
    out = capsys.readouterr().out
    assert "0002-Change-a-file.patch alone, on upstream: applies" in out
    assert "0003-Change-the-module.patch alone, on upstream + 0001" in out
    needs["0003"] = ()
    assert not check_series.check_alone(patches, scratch, run_tests=False)
    assert "0003-Change-the-module.patch alone: " in capsys.readouterr().out


def test_fix_tier_needs_match_the_series_page():
    page = (Path(__file__).parents[2] / "docs" / "series.md").read_text()
    for number, needs in check_series.FIX_TIER_NEEDS.items():
        row = next(r for r in page.splitlines() if r.startswith(f"| {number} "))
        listed = row.split(" | ")[3]
        assert re.findall(r"\b\d{4}\b", listed) == list(needs)


def test_check_series_runs_the_test_classes_a_patch_changes(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    text = (
        "import pytest\n\n\n"
        "def helper():\n    return 1\n\n\n"
        "class FirstTest:\n    def test_a(self):\n        pass\n\n\n"
        "class SecondTest:\n    def test_b(self):\n        pass\n\n\n"
        "class ThirdTests:\n    def test_d(self):\n        pass\n\n\n"
        "@pytest.mark.parametrize('x', [1])\n"
        "def test_c(x):\n    pass\n"
    )
    commit_change(repo, "other.txt", "Before the tests.\n")
    commit_change(repo, "a_test.py", text)
    commit_change(
        repo,
        "a_test.py",
        text.replace("test_b(self):\n        pass", "test_b(self):\n        1")
        .replace("test_d(self):\n        pass", "test_d(self):\n        2")
        .replace("[1]", "[1, 2]")
        .replace("return 1", "return 2"),
    )
    assert check_series.changed_tests(repo, "a_test.py") == [
        "a_test.py::SecondTest",
        "a_test.py::ThirdTests",
        "a_test.py::test_c",
    ]
    # From a base further back: every test class of the file.
    assert check_series.changed_tests(repo, "a_test.py", base="HEAD~2") == [
        "a_test.py::FirstTest",
        "a_test.py::SecondTest",
        "a_test.py::ThirdTests",
        "a_test.py::test_c",
    ]


def test_api_gen_reproduces_the_sdist_api_and_finds_hand_edits(base):
    assert api_gen.differences(base) == []
    utils_api = base / "keras" / "api" / "utils" / "__init__.py"
    utils_api.write_text(utils_api.read_text() + "from os import sep as sep\n")
    assert api_gen.differences(base) == ["utils/__init__.py"]


def test_fixture_tests_are_skipped_without_the_fixture(tmp_path, sdist):
    dest = tmp_path / "keras"
    tree.build_base(dest, sdist)
    fixture = dest / "keras/src/saving/test_data"
    shutil.rmtree(fixture, ignore_errors=True)
    code, failed, counts, skipped = suite.run_pytest(
        [
            "keras/src/saving/saving_lib_test.py",
            "-k",
            "test_legacy_load_skips_missing_nested_containers",
        ],
        dest,
    )
    assert (code, failed, counts["skipped"]) == (0, set(), 1)
    assert skipped == [
        "keras/src/saving/test_data/pre_pr22362_nested_container.keras "
        "(build the tree with SHARDWISE_TEST_DATA set to a copy of it)"
    ]


def test_known_failures_need_a_reason(tmp_path):
    path = tmp_path / "known.txt"
    path.write_text(
        "# comment\nkeras/a_test.py::T::test_x # needs foo\n"
        "[torch] keras/a_test.py::T::test_z # torch only\n"
    )
    known = suite.read_known_failures(path)
    assert known == {
        (None, "keras/a_test.py::T::test_x"): "needs foo",
        ("torch", "keras/a_test.py::T::test_z"): "torch only",
    }
    assert suite.is_known("numpy", "keras/a_test.py::T::test_x", known)
    assert suite.is_known("torch", "keras/a_test.py::T::test_z", known)
    assert not suite.is_known("jax", "keras/a_test.py::T::test_z", known)
    assert not suite.is_known("jax-4", "keras/a_test.py::T::test_z", known)
    path.write_text("keras/a_test.py::T::test_y\n")
    with pytest.raises(ToolError, match="no reason"):
        suite.read_known_failures(path)


def test_repo_known_failures_file_parses():
    known = suite.read_known_failures()
    configs = {config for _, _, config, _, _ in _stages()}
    for config, test_id in known:
        assert config is None or config in configs
        assert test_id.startswith("keras/")


def test_compare_full_reports_each_configuration_run_on_both(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(suite, "FULL_RESULTS", tmp_path / "full")
    monkeypatch.setattr(suite, "FULL_SUITE_RESULTS", tmp_path / "out.txt")
    failing = {
        ("jax", "upstream"): ["keras/a_test.py::T::test_old"],
        ("jax", "fork"): ["keras/a_test.py::T::test_old"],
        ("jax-4", "upstream"): [],
        ("jax-4", "fork"): ["keras/b_test.py::T::test_new"],
        # Run on one tree only: left out, and named as not run.
        ("numpy", "fork"): [],
        # The nightly pair, compared on its own.
        ("jax", "next-upstream"): ["keras/a_test.py::T::test_old"],
        ("jax", "next"): ["keras/c_test.py::T::test_next"],
    }
    for (config, kind), ids in failing.items():
        folder = tmp_path / "full" / config / kind
        folder.mkdir(parents=True)
        header = f"# commit {'a' * 40}\n# date 2026-12-04\n"
        header += "".join(f"# {key} 1\n" for key in suite.COUNTED)
        (folder / "chunk-1-of-1.txt").write_text(
            header + "".join(f"{i}\n" for i in ids)
        )
    assert suite.compare() == 1
    text = (tmp_path / "out.txt").read_text()
    assert "# jax: 1 failures on upstream, 1 on the fork, 0 new" in text
    assert "# jax-4: 0 failures on upstream, 1 on the fork, 1 new" in text
    assert "jax-4 fork FAILED keras/b_test.py::T::test_new" in text
    assert "jax fork: 1 chunks, 1 passed" in text
    assert "tree aaaaaaaaaaaa, run 2026-12-04" in text
    assert "# Not run whole on both trees: jax-1, jax-nnx, tensorflow" in text
    assert "numpy" in text.split("Not run whole on both trees:")[1]
    assert "# jax: 1 failures on next-upstream, 1 on next, 1 new" in text
    assert "jax next FAILED keras/c_test.py::T::test_next" in text
    assert "jax next: 1 chunks, 1 passed" in text
    nightly = text.split("Not run whole on both nightly trees:")[1]
    assert nightly.startswith(" jax-1, jax-4, jax-nnx\n")


def test_full_refuses_an_unknown_configuration():
    with pytest.raises(ToolError, match="CONFIG must be one of"):
        suite.full("1/1", "fork", config="jax-8")
    with pytest.raises(ToolError, match="nightly trees run in jax"):
        suite.full("1/1", "next", config="torch")


def _stages():
    return [
        (title, cwd, config, args, env)
        for title, config, cwd, args, env in suite.stages(Path("tree"), "fork")
    ]


def test_stages_cover_upstream_ci_configurations():
    envs = {config: env for _, _, config, _, env in _stages()}
    assert set(envs) == {
        "jax",
        "jax-1",
        "jax-4",
        "jax-nnx",
        "jax-16",
        "tensorflow",
        "torch",
        "numpy",
    }
    assert envs["jax-nnx"]["KERAS_NNX_ENABLED"] == "true"
    assert envs["jax-16"]["XLA_FLAGS"].endswith("device_count=16")
    assert envs["jax-1"]["XLA_FLAGS"].endswith("device_count=1")
    # Upstream CI's multi-device tier, from the files that mention the
    # marker (none in this tree).
    tier = [args for _, _, config, args, _ in _stages() if config == "jax-4"]
    assert tier == [["-n", "2", "-m", "multi_device"]]
    for config, env in envs.items():
        assert env["KERAS_BACKEND"] == config.partition("-")[0]


def test_patched_folders(tmp_path):
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "0001-a.patch").write_text(
        "diff --git a/keras/src/backend/jax/core.py "
        "b/keras/src/backend/jax/core.py\n"
        "diff --git a/keras/src/layers/layer.py b/keras/src/layers/layer.py\n"
    )
    (patches / "series").write_text("0001-a.patch\n")
    assert suite.patched_folders(patches) == [
        "keras/src/backend/jax",
        "keras/src/layers",
    ]


def test_docs_describe_every_make_target():
    # The wheel itself is built and installed in a fresh venv by
    # integration_tests/test_install.py.
    root = Path(__file__).resolve().parents[2]
    makefile = (root / "Makefile").read_text()
    readme = "".join(
        p.read_text() for p in [root / "README.md", *root.glob("docs/*.md")]
    )
    targets = [
        line.split(":")[0]
        for line in makefile.splitlines()
        if "## " in line and not line.startswith("\t")
    ]
    for target in targets:
        assert f"make {target}" in readme, target


def test_repo_next_files_parse():
    pin = upstream.read_pin(next_lib.NEXT_PIN)
    assert pin["name"] == "keras-nightly"
    assert pin["keras_hub"].startswith("keras-hub-nightly==")
    known = suite.read_known_failures(next_lib.NEXT_KNOWN_FAILURES)
    assert known
    for config, test_id in known:
        assert config is None and test_id.startswith("keras/")
    # patches-next/ holds the series rebased onto the nightly, in order, up
    # to the first patch not yet rebased (`make next` names it).
    rebased = [
        next_lib._subject(next_lib.NEXT_PATCHES / n)
        for n in read_series(next_lib.NEXT_PATCHES)
    ]
    series = [next_lib._subject(PATCHES / n) for n in read_series(PATCHES)]
    assert rebased and rebased == series[: len(rebased)]


def test_next_status_line_names_patches_and_files():
    line = next_lib.status_line(
        "3.16.0.dev1",
        [
            ("0001-a.patch", "clean", [], True),
            ("0002-b.patch", "conflict", ["keras/x.py", "keras/y.py"], True),
            ("0003-c.patch", "not checked", [], False),
        ],
    )
    assert line == (
        "keras-nightly 3.16.0.dev1: 0001 clean; 0002 conflict (keras/x.py, "
        "keras/y.py); 0003 not checked. patches-next/ has 2 of 3."
    )


def test_multi_device_tier_collects_the_files_that_mention_it(tmp_path):
    (tmp_path / "keras" / "src").mkdir(parents=True)
    (tmp_path / "keras" / "src" / "a_test.py").write_text(
        "@pytest.mark.multi_device\ndef test_a(): pass\n"
    )
    (tmp_path / "keras" / "src" / "b_test.py").write_text(
        "def test_b(): pass\n"
    )
    assert suite.multi_device_test_files(tmp_path) == ["keras/src/a_test.py"]


def test_hub_series_applies_without_upstream_tests(tmp_path, monkeypatch):
    # Where no clone of keras-hub is found, the base is the sdist alone and
    # the hub series still applies: its tests are new files.
    monkeypatch.setenv("KERAS_HUB_REPO", str(tmp_path / "no-clone"))
    dest = tmp_path / "keras-hub"
    assert not hub.build_base(dest)
    assert not (dest / "conftest.py").exists()
    names = tree.apply_series(dest, hub.HUB_PATCHES)
    assert names == read_series(hub.HUB_PATCHES)
    assert (dest / "keras_hub" / "__init__.py").exists()


def test_repo_hub_pin_parses():
    pin = upstream.read_pin(hub.HUB_PIN)
    assert pin["name"] == "keras-hub"
    assert len(pin["tests_commit"]) == 40


def test_gate_runs_the_chunks_missing_or_run_on_other_content(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(suite, "FULL_RESULTS", tmp_path)
    contents = {"upstream": None, "fork": "f1", "next-upstream": "n0"}
    contents["next"] = "n1"
    monkeypatch.setattr(suite, "_current_content", contents.get)

    def write(config, kind, name, content):
        folder = tmp_path / config / kind
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(f"# content {content}\n")

    for config, chunks in suite.GATE_CHUNKS.items():
        for i in range(1, chunks + 1):
            name = f"chunk-{i}-of-{chunks}.txt"
            write(config, "upstream", name, "u0")
            write(config, "fork", name, "f1")
            if config in suite.NEXT_CONFIGS:
                write(config, "next-upstream", name, "n0")
                write(config, "next", name, "n1")
    assert suite.pending() == []
    # A fork chunk run on an earlier series, a missing nightly chunk, and
    # a complete split of another size, which holds.
    write("jax-1", "fork", "chunk-3-of-4.txt", "f0")
    (tmp_path / "jax-nnx" / "next" / "chunk-2-of-4.txt").unlink()
    for path in (tmp_path / "torch" / "upstream").iterdir():
        path.unlink()
    write("torch", "upstream", "chunk-1-of-1.txt", "u0")
    assert suite.pending() == [
        ("fork", "jax-1", "3/4"),
        ("next", "jax-nnx", "2/4"),
    ]
    ran = []
    monkeypatch.setattr(suite, "materialize", lambda tree: [])
    monkeypatch.setattr(suite, "full", lambda *args: ran.append(args))
    monkeypatch.setattr(suite, "compare", lambda: 0)
    assert suite.gate(dry_run=True) == 0
    assert ran == []
    assert suite.gate() == 0
    assert ran == [("3/4", "fork", "jax-1"), ("2/4", "next", "jax-nnx")]
