"""Development entry point of the materialized Keras tree.

Never packaged (the wheel maps `keras` to `keras/api`). With the tree root on
`sys.path`, `import keras` loads this file, which exposes the public API from
`keras/api` while `keras.src` stays importable from `keras/src`.
"""

import os

# Let `keras.<submodule>` find the public API modules in keras/api.
__path__.append(os.path.join(os.path.dirname(__file__), "api"))

from keras.api import *  # noqa: E402, F403
from keras.api import __version__  # noqa: E402, F401

del os
