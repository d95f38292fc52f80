"""The PEP 517 backend of `pip install` of this folder: the patched
keras-hub's wheel, built by `tools/pep517.py` of the checkout around it
(pip builds from the whole clone, so `..` is there)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.pep517 import build_hub_wheel as build_wheel  # noqa: E402, F401
from tools.pep517 import get_requires_for_build_wheel  # noqa: E402, F401


class UnsupportedOperation(Exception):
    """PEP 517's answer to `build_sdist`: this folder builds only with the
    checkout around it."""


def build_sdist(sdist_directory, config_settings=None):
    raise UnsupportedOperation(
        "the patched keras-hub builds only as a wheel, from a checkout of "
        "shardwise: pip install 'keras-hub @ git+URL#subdirectory=hub'"
    )
