"""A pytest plugin that lifts the harness's skip of multi-device tests on
fewer than 2 devices, so that tests whose meshes are sized from
`jax.device_count()` run on one accelerator (`device_check.py`)."""

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    for item in items:
        item.own_markers = [
            marker
            for marker in item.own_markers
            if not (
                marker.name == "skipif"
                and "more than one device" in marker.kwargs.get("reason", "")
            )
        ]
