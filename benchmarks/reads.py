"""Reads a checkpoint's bytes plainly: the floor of a load's time
(`run.py`), and the same read into new memory (the `read_new_memory_*`
scenario of `scenarios.py`). No dependencies: both venvs import it."""


def read_into(paths, sizes, view):
    """Reads the files `paths`, of `sizes` bytes, one after the other,
    unbuffered, into the writable buffer `view`."""
    offset = 0
    for path, size in zip(paths, sizes):
        end = offset + size
        with open(path, "rb", buffering=0) as f:
            # One call may read less than asked (at most 2 GiB on Linux).
            while offset < end:
                count = f.readinto(view[offset:end])
                if not count:
                    raise ValueError(f"{path}: shorter than {size} bytes")
                offset += count
