"""Runs a scenario in N JAX processes on this machine and collects results.

Each process (`worker.py`) gets its own virtual CPU devices and joins the
others through a coordinator on a free loopback port, so 2 processes of 4
devices make one global mesh of 8 devices, as 2 hosts of a pod slice would.
The launcher always ends: when one process fails, the others get a few
seconds to finish and are then killed, and nothing runs past the deadline.

Usage:
  python -m integration_tests.multiprocess [--tree DIR] [--size MIB]
      [SCENARIO ...]
prints, per process, the bytes it read and holds against its own shards,
its busiest device and its RSS increase (`make multiprocess`). `hub_hf`
reports the bytes read from storage (`read_bytes`) against its share of
its own checkpoint; the others, the bytes read by system calls (`rchar`)
against their share of the embedding model.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `SHARDWISE_TREE` points the harness at another tree (such as the base).
TREE = Path(os.environ.get("SHARDWISE_TREE", ROOT / "build" / "keras"))
# keras-hub 0.32.0 with patches-hub/ (`make tree`), for the `hub_hf`
# scenario; on the base it changes nothing. `SHARDWISE_HUB_TREE` points
# it at another keras-hub tree.
HUB_TREE = Path(
    os.environ.get("SHARDWISE_HUB_TREE", ROOT / "build" / "keras-hub")
)
MIB = 2**20

# The model every scenario builds: an embedding of `size` MiB sharded by
# column, then a dense layer whose kernel is sharded by row.
EMBED_DIM = 1024
DENSE_UNITS = 64


def rows(size_mib):
    return size_mib * 2**20 // (EMBED_DIM * 4)


def own_bytes(size_mib, num_processes, devices_per_process):
    """Bytes of the model's weights that the devices of one process hold:
    its share of the sharded embeddings and kernel, and one copy of the
    replicated bias per device."""
    embeddings = rows(size_mib) * EMBED_DIM * 4
    kernel = EMBED_DIM * DENSE_UNITS * 4
    bias = DENSE_UNITS * 4
    return (embeddings + kernel) // num_processes + devices_per_process * bias


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    """What the processes of one scenario left: `results[i]` is the dict
    process i wrote (None if it wrote nothing), `returncodes[i]` its exit
    status, `killed[i]` whether the launcher had to stop it."""

    def __init__(self, scenario, results, returncodes, killed, logs):
        self.scenario = scenario
        self.results = results
        self.returncodes = returncodes
        self.killed = killed
        self.logs = logs

    def log_tail(self, process_id, num_chars=3000):
        return self.logs[process_id].read_text()[-num_chars:]

    def check(self):
        """Raises if any process failed; returns the results."""
        for i, code in enumerate(self.returncodes):
            if code != 0:
                raise RuntimeError(
                    f"{self.scenario}: process {i} exited with {code}"
                    f"{' (killed)' if self.killed[i] else ''}:\n"
                    f"{self.log_tail(i)}"
                )
        return self.results


def launch(
    scenario,
    workdir,
    num_processes=2,
    devices_per_process=4,
    size=8,
    tree=TREE,
    timeout=120,
    grace=5,
):
    """Runs `scenario` in `num_processes` processes; returns a `Run`."""
    workdir = Path(workdir)
    coordinator = f"127.0.0.1:{free_port()}"
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=(
            f"--xla_force_host_platform_device_count={devices_per_process}"
        ),
        PYTHONPATH=os.pathsep.join([str(tree), str(HUB_TREE), str(ROOT)]),
    )
    processes, logs = [], []
    for i in range(num_processes):
        log = workdir / f"{scenario}-{i}.log"
        logs.append(log)
        (workdir / f"{scenario}-{i}.json").unlink(missing_ok=True)
        command = [
            sys.executable,
            "-m",
            "integration_tests.worker",
            scenario,
            f"--process-id={i}",
            f"--num-processes={num_processes}",
            f"--coordinator={coordinator}",
            f"--workdir={workdir}",
            f"--size={size}",
        ]
        with open(log, "w") as out:
            processes.append(
                subprocess.Popen(
                    command,
                    cwd=ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    # Its own process group, so that a kill reaches every
                    # thread and child it started.
                    start_new_session=True,
                )
            )
    deadline = time.monotonic() + timeout
    killed = [False] * num_processes
    try:
        while any(p.poll() is None for p in processes):
            if any(p.poll() not in (None, 0) for p in processes):
                # One failed: the others may wait for it forever in a
                # collective or in JAX's shutdown barrier.
                deadline = min(deadline, time.monotonic() + grace)
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        for i, p in enumerate(processes):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                killed[i] = True
    results = []
    for i in range(num_processes):
        path = workdir / f"{scenario}-{i}.json"
        results.append(json.loads(path.read_text()) if path.exists() else None)
    return Run(
        scenario, results, [p.returncode for p in processes], killed, logs
    )


def prepare(workdir, size=8, tree=TREE):
    """Writes the checkpoints and reference values: one process, 8
    devices, the same seed as the scenarios."""
    launch(
        "reference",
        workdir,
        num_processes=1,
        devices_per_process=8,
        size=size,
        tree=tree,
    ).check()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenarios", nargs="*", default=["build", "load"])
    parser.add_argument("--tree", type=Path, default=TREE)
    parser.add_argument("--size", type=int, default=250)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    print(f"keras tree: {args.tree}; embedding of {args.size} MiB over 8 ")
    print(f"devices, {args.processes} processes of {8 // args.processes}.")
    with tempfile.TemporaryDirectory() as workdir:
        prepare(workdir, args.size, args.tree)
        share = own_bytes(args.size, args.processes, 8 // args.processes)
        header = (
            f"{'scenario':<14} {'proc':>4} {'read MiB':>9} {'wrote MiB':>9} "
            f"{'held MiB':>9} "
            f"{'own MiB':>8} {'busiest dev':>12} {'RSS +MiB':>9} "
            f"{'RSS/own':>8} {'seconds':>8}"
        )
        print(header)
        for scenario in args.scenarios:
            run = launch(
                scenario,
                workdir,
                num_processes=args.processes,
                devices_per_process=8 // args.processes,
                size=args.size,
                tree=args.tree,
                timeout=600,
            )
            for i, result in enumerate(run.results):
                if run.returncodes[i] != 0 or result is None:
                    error = (result or {}).get("error", {})
                    print(
                        f"{scenario:<14} {i:>4} failed "
                        f"(exit {run.returncodes[i]}): "
                        f"{error.get('type')}: "
                        f"{str(error.get('message'))[:200]}"
                    )
                    continue
                print(row(scenario, i, result, share))


def row(scenario, process_id, result, share):
    """One line of the table; '-' where the scenario did not measure."""

    def mib(value):
        return "-" if value is None else f"{value / MIB:.1f}"

    # A scenario with its own model says what this process's share is.
    share = result.get("share_bytes", share)
    busiest = result.get("peak_device_bytes")
    shard = result.get("largest_device_bytes")
    rss = result.get("rss_increase")
    return (
        f"{scenario:<14} {process_id:>4} {mib(result.get('bytes_read')):>9} "
        f"{mib(result.get('bytes_written')):>9} "
        f"{mib(result.get('bytes_held')):>9} {share / MIB:>8.1f} "
        f"{'-' if busiest is None else f'{busiest / shard:.2f} shards':>12} "
        f"{mib(rss):>9} {'-' if rss is None else f'{rss / share:.2f}':>8} "
        f"{result.get('seconds', 0):>8.2f}"
    )


if __name__ == "__main__":
    main()
