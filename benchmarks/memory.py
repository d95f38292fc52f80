"""Per-device memory of live JAX arrays, sampled while a scenario runs.

On CPU the virtual devices share the host's memory, so process RSS cannot
say which device holds what. Instead, the sampler sums, per device, the
bytes of the buffers of every live `jax.Array`. A buffer that several array
objects alias (a sharded array and the single-device arrays JAX builds for
its `addressable_shards`) is counted once, keyed by device and buffer
address. On the thread that enters the sampler, samples are taken as each
Python function returns (`sys.setprofile`) and before each line of code
outside JAX and NumPy (`sys.settrace`), so that an array that lives only
inside one call is seen; on a background thread, for arrays that other
threads make; and, through `hooks()`, just before and just after every
host-to-device transfer, for what happens within JAX's `device_put`.
"""

import collections
import contextlib
import functools
import math
import os
import sys
import threading
import weakref

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.interpreters import pxla


def buffers_of(array):
    """Returns [(device id, buffer address, bytes)] of `array`'s buffers,
    or [] if it was deleted (or donated) before we looked at it."""
    try:
        if array.is_deleted():
            return []
        # `_arrays` holds one single-device array per addressable shard (JAX
        # caches them on the array); for a single-device array it holds the
        # array itself.
        return [
            (
                next(iter(b.devices())).id,
                b.unsafe_buffer_pointer(),
                b.nbytes,
            )
            for b in array._arrays
        ]
    except Exception:
        return []


def _usage(buffer_lists):
    """{device id: bytes}, each (device, address) counted once."""
    usage = collections.Counter()
    seen = set()
    for buffers in buffer_lists:
        for device, address, num_bytes in buffers:
            if (device, address) not in seen:
                seen.add((device, address))
                usage[device] += num_bytes
    return usage


def device_bytes():
    """Returns {device id: bytes held by live arrays on that device}."""
    return _usage(buffers_of(array) for array in jax.live_arrays())


# Returns inside JAX and NumPy (tracing, dispatch) are most of a model's
# function returns. The sampler skips those that stay inside them, and
# does not trace their lines; it samples where they return to other code,
# as each operation completes. `hooks()` covers what happens within a
# transfer.
_LIBRARIES = tuple(
    os.path.dirname(module.__file__) + os.sep for module in (jax, np)
)


class Sampler:
    """Keeps the per-device peak of `device_bytes()`."""

    def __init__(self, interval=0.002):
        self.interval = interval
        self.peak = collections.Counter()
        self.num_samples = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = None
        self._profile = None
        self._trace = None
        # What the last sample at a return saw: the ids of the live arrays,
        # and per id a weak reference to the array (its callback marks a
        # free) and its buffers as (device id, address, bytes).
        self._ids = None
        self._buffers = {}

    def sample(self):
        self._record(device_bytes())

    def _record(self, usage):
        with self._lock:
            self.num_samples += 1
            for device, num_bytes in usage.items():
                if num_bytes > self.peak[device]:
                    self.peak[device] = num_bytes

    def _freed(self, ref):
        self._ids = None

    def _on_return(self, frame, event, arg):
        # A Python function's return: the arrays it made and has not freed
        # are all live. Returns within JAX and NumPy, and the sampler's own
        # (`nbytes` in `device_bytes()`, `_freed`), are skipped.
        if event != "return":
            return
        caller = frame.f_back
        if (
            caller is None
            or frame.f_code.co_filename == __file__
            or caller.f_code.co_filename == __file__
        ):
            return
        if frame.f_code.co_filename.startswith(
            _LIBRARIES
        ) and caller.f_code.co_filename.startswith(_LIBRARIES):
            return
        self._sample_if_changed()

    def _on_call(self, frame, event, arg):
        # A jitted function whose compilation is cached runs in C++ and
        # makes no profile event: trace the lines of the code that calls it
        # (outside JAX, NumPy and this module), sampling before each line.
        filename = frame.f_code.co_filename
        if filename == __file__ or filename.startswith(_LIBRARIES):
            return None
        return self._on_line

    def _on_line(self, frame, event, arg):
        if event == "line":
            self._sample_if_changed()
        return self._on_line

    def _sample_if_changed(self):
        # Most returns and lines change no array: those are found from the
        # ids of the live arrays, without walking any buffer.
        arrays = jax.live_arrays()
        ids = list(map(id, arrays))
        if ids == self._ids:
            return
        self._ids = ids
        entries = []
        for array in arrays:
            entry = self._buffers.get(id(array))
            if entry is None or entry[0]() is not array:
                entry = (weakref.ref(array, self._freed), buffers_of(array))
            entries.append((array, entry))
        self._buffers = {id(array): entry for array, entry in entries}
        usage = _usage(
            entry[1] for array, entry in entries if not array.is_deleted()
        )
        del arrays, entries
        self._record(usage)

    def _loop(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self):
        self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        self._profile = sys.getprofile()
        self._trace = sys.gettrace()
        sys.setprofile(self._on_return)
        sys.settrace(self._on_call)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._trace)
        sys.setprofile(self._profile)
        self._ids = None
        self._buffers = {}
        self._stop.set()
        self._thread.join()
        self.sample()


# The entry points through which data reaches a device, and the module that
# each is looked up in at call time. `pxla.batched_device_put` (private) is
# where `jax.device_put` of a single-device array onto a sharding places the
# slices it has cut on the source device: sampling just before it sees the
# full array and all its slices on that device at once.
TRANSFERS = (
    (pxla, "batched_device_put"),
    (jax, "device_put"),
    (jax, "make_array_from_callback"),
    (jax, "make_array_from_single_device_arrays"),
    (jnp, "asarray"),
    (jnp, "array"),
)


@contextlib.contextmanager
def hooks(sampler):
    """Samples just before and just after each call of `TRANSFERS`."""
    originals = [
        (module, name, getattr(module, name)) for module, name in TRANSFERS
    ]

    def wrap(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            sampler.sample()
            result = function(*args, **kwargs)
            sampler.sample()
            return result

        return wrapper

    for module, name, function in originals:
        setattr(module, name, wrap(function))
    try:
        yield
    finally:
        for module, name, function in originals:
            setattr(module, name, function)


def shard_bytes(arrays):
    """Returns {device id: bytes} of the given arrays' shards."""
    usage = collections.Counter()
    for array in arrays:
        indices = array.sharding.addressable_devices_indices_map(array.shape)
        for device, index in indices.items():
            size = math.prod(
                len(range(*s.indices(n))) for s, n in zip(index, array.shape)
            )
            usage[device.id] += size * array.dtype.itemsize
    return usage


def rss_bytes():
    """Returns (current RSS, peak RSS since the last `reset_peak_rss`)."""
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(value.split()[0]) * 1024
    return values["VmRSS"], values["VmHWM"]


def written_bytes():
    """Returns the bytes this process has caused to be written to storage
    (`write_bytes` of /proc/self/io): counted when pages of a file are
    dirtied, so a temporary file deleted before it reaches the disk counts
    too. Writes to a tmpfs are not counted."""
    with open("/proc/self/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == "write_bytes":
                return int(value)
    raise RuntimeError("no write_bytes in /proc/self/io")


def reset_peak_rss():
    """Resets the kernel's peak RSS of this process to its current RSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class _RecordedJit:
    """A `jax.jit` result that records the abstract arguments of its calls."""

    def __init__(self, jitted, calls):
        self._jitted = jitted
        self._calls = calls

    def __call__(self, *args, **kwargs):
        # Keep shapes, dtypes and shardings only: holding the arrays would
        # keep them alive and change what the sampler sees.
        abstract = jax.tree.map(_abstract, (args, kwargs))
        self._calls.append((self._jitted, *abstract))
        return self._jitted(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._jitted, name)


def _abstract(x):
    if isinstance(x, jax.Array):
        # An uncommitted array (such as a fresh seed) may be moved by jit.
        sharding = x.sharding if x.committed else None
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
    return x


@contextlib.contextmanager
def record_jits(calls):
    """Records every call of a function jitted inside the context."""
    original = jax.jit

    def jit(*args, **kwargs):
        return _RecordedJit(original(*args, **kwargs), calls)

    jax.jit = jit
    try:
        yield calls
    finally:
        jax.jit = original


def xla_temp_bytes(calls):
    """The largest per-device XLA temporary allocation among the recorded
    executables, from their compiled `memory_analysis()`."""
    largest = 0
    for jitted, args, kwargs in calls:
        analysis = jitted.lower(*args, **kwargs).compile().memory_analysis()
        if analysis is not None:
            largest = max(largest, analysis.temp_size_in_bytes)
    return largest
