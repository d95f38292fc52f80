"""Tests of the PEP 517 backend's pieces (`tools/pep517.py`); the install
itself, into a fresh venv, is `integration_tests/test_install.py`."""

import importlib.util
import shutil
import tarfile
import tomllib

import pytest

from tools import pep517
from tools import upstream
from tools.common import ROOT
from tools.common import read_series


@pytest.fixture(scope="module")
def sdist():
    return upstream.fetch()


def test_pyproject_names_the_in_tree_backend():
    system = tomllib.loads((ROOT / "pyproject.toml").read_text())
    system = system["build-system"]
    assert system["build-backend"] == "tools.pep517"
    assert system["backend-path"] == ["."]


def test_hub_folder_builds_the_patched_keras_hub():
    system = tomllib.loads((ROOT / "hub" / "pyproject.toml").read_text())
    system = system["build-system"]
    assert system["build-backend"] == "backend"
    assert system["backend-path"] == ["."]
    spec = importlib.util.spec_from_file_location(
        "hub_backend", ROOT / "hub" / "backend.py"
    )
    backend = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backend)
    assert backend.build_wheel is pep517.build_hub_wheel
    with pytest.raises(backend.UnsupportedOperation, match="only as a wheel"):
        backend.build_sdist("unused")


def test_keras_is_built_with_the_pinned_setuptools():
    requires = pep517.get_requires_for_build_wheel()
    assert requires[0].startswith("setuptools==")
    assert requires[0] in (ROOT / "requirements-test.txt").read_text()
    assert pep517.get_requires_for_build_sdist() == []


def test_sdist_in_the_cache_is_reused(tmp_path, sdist):
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(sdist, cache / sdist.name)
    scratch = tmp_path / "scratch"
    assert pep517.fetch_sdist(scratch, cache=cache) == cache / sdist.name
    assert not scratch.exists()


def test_build_wheel_refuses_another_sdist(tmp_path, sdist, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / sdist.name).write_bytes(sdist.read_bytes()[:-1])
    monkeypatch.setattr(pep517, "CACHE", cache)
    with pytest.raises(SystemExit, match="checksum mismatch"):
        pep517.build_wheel(tmp_path / "dist")
    assert not (tmp_path / "dist").exists()


def test_sdist_holds_what_build_wheel_reads(tmp_path):
    name = pep517.build_sdist(tmp_path)
    top = f"keras-3.15.1+shardwise.{len(read_series())}"
    assert name == f"{top}.tar.gz"
    with tarfile.open(tmp_path / name) as tar:
        names = set(tar.getnames())
        pkg_info = tar.extractfile(f"{top}/PKG-INFO").read().decode()
    assert f"Version: {top.split('-')[1]}\n" in pkg_info
    for path in (
        "pyproject.toml",
        "UPSTREAM",
        "tools/pep517.py",
        "patches/series",
        "harness/conftest.py",
        *(f"patches/{patch}" for patch in read_series()),
    ):
        assert f"{top}/{path}" in names
    assert not [n for n in names if "__pycache__" in n]
