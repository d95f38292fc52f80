"""Pytest configuration for the materialized Keras tree.

The Keras source distribution ships without the repository's root
`conftest.py`. This is shardwise's own version: it registers the markers
that the upstream tests use and provides `skip_if_backend`, which several
upstream test modules import with `from conftest import skip_if_backend`.
Tests that read an upstream fixture the sdist lacks are skipped, with
`MISSING_FIXTURE` in their reason, when the tree was built without it.
"""

import os
from pathlib import Path

# Keep JAX's default dtype at 32 bits even when a test enables x64, to
# match Keras's default floatx.
os.environ.setdefault("JAX_DEFAULT_DTYPE_BITS", "32")

try:
    # torch must be imported before tensorflow when both are installed,
    # otherwise importing torch afterwards can crash the process.
    import torch  # noqa: F401
except ImportError:
    torch = None

import pytest  # noqa: E402

from keras.src.backend import backend  # noqa: E402


# Upstream tests that read a data file the sdist omits, and that file.
FIXTURES = {
    "keras/src/saving/saving_lib_test.py::SavingBattleTest::"
    "test_legacy_load_skips_missing_nested_containers": (
        "keras/src/saving/test_data/pre_pr22362_nested_container.keras"
    ),
}
MISSING_FIXTURE = "upstream fixture missing from the sdist"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "requires_trainable_backend: the test needs a backend that can train",
    )
    config.addinivalue_line(
        "markers",
        "multi_device: the test needs more than one device",
    )


def _device_count():
    if backend() != "jax":
        return 1
    import jax

    return jax.device_count()


def pytest_collection_modifyitems(config, items):
    needs_trainable = pytest.mark.skipif(
        backend() in ("numpy", "openvino"),
        reason="Training is not implemented for the NumPy and OpenVINO "
        "backends.",
    )
    needs_devices = pytest.mark.skipif(
        _device_count() < 2,
        reason="The test needs more than one device; set "
        "XLA_FLAGS=--xla_force_host_platform_device_count=8 on CPU.",
    )
    root = Path(__file__).parent
    for item in items:
        fixture = FIXTURES.get(item.nodeid.split("[")[0])
        if fixture and not (root / fixture).exists():
            item.add_marker(
                pytest.mark.skip(
                    reason=f"{MISSING_FIXTURE}: {fixture} (build the tree "
                    "with SHARDWISE_TEST_DATA set to a copy of it)"
                )
            )
        if "requires_trainable_backend" in item.keywords:
            item.add_marker(needs_trainable)
        if "multi_device" in item.keywords:
            item.add_marker(needs_devices)


def skip_if_backend(given_backend, reason):
    """Returns a marker that skips the test when running on `given_backend`."""
    return pytest.mark.skipif(backend() == given_backend, reason=reason)
