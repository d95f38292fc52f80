"""Times reading a `.keras` archive's weights member slice by slice, as
sharded loads read it, through each file object the fork could use, on the
Python that runs it: `patches/0004`'s figures for Python 3.11-3.13.

Each of `--devices` devices reads its slice of columns of every dataset,
one dataset after another, through `H5Array` (whole rows in blocks, as
`patches/0004` reads a file object):

- `zipfile`: `ZipFile.open()`, what `load_weights()` reads through.
- `in place`: `_StoredZipMember`, the stored member in the archive's file.
- `in memory`: `io.BytesIO` of the whole member, what `load_model()` reads
  when memory is sufficient (the host holds the member).

Also the CRC-32 pass and a plain sequential read of the member (the floor).
Needs NumPy and h5py beside the fork's tree:

    PYTHONPATH=build/keras KERAS_BACKEND=numpy python -m \
        benchmarks.keras_member_reads
"""

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
import zipfile

import h5py
import numpy as np
from keras.src.saving import saving_lib


def make_archive(folder, datasets, rows, columns):
    weights = os.path.join(folder, "model.weights.h5")
    with h5py.File(weights, "w") as f:
        for i in range(datasets):
            f[f"layers/dense_{i}/vars/0"] = np.full(
                (rows, columns), i, "float32"
            )
    path = os.path.join(folder, "model.keras")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", "{}")
        archive.write(weights, "model.weights.h5")
    os.remove(weights)
    return path


def read_slices(fileobj, datasets, devices):
    with h5py.File(fileobj, "r") as f:
        for i in range(datasets):
            array = saving_lib.H5Array(f[f"layers/dense_{i}/vars/0"])
            width = array.shape[1] // devices
            for d in range(devices):
                array[0 : array.shape[0], d * width : (d + 1) * width]


def timed(function, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=int, default=16)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--columns", type=int, default=1024)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = make_archive(folder, args.datasets, args.rows, args.columns)
        name = "model.weights.h5"
        with zipfile.ZipFile(path) as archive:
            size = archive.getinfo(name).file_size

            def through_zipfile():
                with archive.open(name) as member:
                    read_slices(member, args.datasets, args.devices)

            def in_place():
                with saving_lib._StoredZipMember(archive, name) as member:
                    read_slices(member, args.datasets, args.devices)

            def in_memory():
                member = io.BytesIO(archive.read(name))
                read_slices(member, args.datasets, args.devices)

            def crc_pass():
                saving_lib._check_zip_member_crc(archive, name)

            def sequential():
                with open(path, "rb", buffering=0) as f:
                    while f.read(2**24):
                        pass

            print(
                f"Python {sys.version.split()[0]}: {args.datasets} datasets "
                f"of ({args.rows}, {args.columns}) float32, {size / 2**20:.0f}"
                f" MiB member, {args.devices} column slices each, median of "
                f"{args.repeats} (warm page cache)"
            )
            for label, function in (
                ("zipfile", through_zipfile),
                ("in place", in_place),
                ("in memory", in_memory),
                ("CRC-32 pass", crc_pass),
                ("sequential read", sequential),
            ):
                seconds = timed(function, args.repeats)
                print(f"  {label:16} {seconds:7.2f} s")


if __name__ == "__main__":
    main()
