"""CPU-seconds of a running training's Ray processes, sampled over time (issue 46, item 7).

Run it beside a training on the same node; every ``--every`` seconds it reads
``/proc/<pid>/stat`` (user + system time, all threads) of each process whose title names one
of Ray's roles, and appends one CSV row per role: the wall time since the sampler started, the
role, its CPU-seconds summed over every process it has had and how many are live. It stops when
the training worker has been gone for ``--idle-samples`` samples in a row (a sweep starts the next
trial's worker within a minute) or after ``--minutes``, then prints each role's CPU-seconds and
share of a core over the whole time::

    python bench/data_path_cpu.py --out /tmp/cpu.csv --every 60 --minutes 90

Roles (the process title Ray gives each actor): ``SplitCoordinator`` (Ray Data's coordinator of
the training split), ``MapWorker`` (the loader's :class:`~xmr.train.plan.DecodeSlots`
actors), ``RayTrainWorker`` (the training worker). A process that restarts starts again from 0
CPU-seconds; the CSV keeps each sample so that shows.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

ROLES = ("SplitCoordinator", "MapWorker", "RayTrainWorker")
TICKS = os.sysconf("SC_CLK_TCK")


def role_of(pid: int, session: int | None = None) -> str | None:
    """The Ray role in process ``pid``'s title, or None (not a Ray actor we track, gone, or
    outside the process session ``session`` when one is given)."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        if session is not None and os.getsid(pid) != session:
            return None
    except OSError:
        return None
    if not title.startswith("ray::"):
        return None
    return next((role for role in ROLES if title[5:].startswith(role)), None)


def cpu_seconds(pid: int) -> float:
    """User + system CPU-seconds of ``pid`` (all its threads); 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


class Ledger:
    """Each role's CPU-seconds over every process it has had: a process that exits (a trial's
    worker, a loader torn down between epochs) keeps the last CPU-seconds read from it."""

    def __init__(self, session: int | None = None) -> None:
        self.session = session
        self.last: dict[int, tuple[str, float]] = {}

    def sample(self) -> dict[str, tuple[float, int]]:
        """Each role's CPU-seconds so far and its live process count."""
        live = {role: 0 for role in ROLES}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and (role := role_of(int(entry.name), self.session)):
                seconds = cpu_seconds(int(entry.name))
                if seconds:
                    self.last[int(entry.name)] = (role, seconds)
                    live[role] += 1
        totals = dict.fromkeys(ROLES, 0.0)
        for role, seconds in self.last.values():
            totals[role] += seconds
        return {role: (totals[role], live[role]) for role in ROLES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="CSV to append samples to")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--minutes", type=float, default=90.0, help="longest sampling time")
    parser.add_argument(
        "--idle-samples",
        type=int,
        default=5,
        help="stop after this many samples in a row with no training worker",
    )
    parser.add_argument(
        "--session",
        type=int,
        default=None,
        help="count only processes of this session id (the training's, when "
        "other Ray runs share the node; `ps -o sid= -p <driver pid>`)",
    )
    args = parser.parse_args()
    start, ledger, rows, idle = time.monotonic(), Ledger(args.session), [], 0
    with args.out.open("a", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["wall_s", "role", "cpu_s", "processes"])
        while time.monotonic() - start < args.minutes * 60 and idle < args.idle_samples:
            now, wall = ledger.sample(), time.monotonic() - start
            rows.append((wall, now))
            writer.writerows(
                [round(wall, 1), role, round(cpu, 2), n] for role, (cpu, n) in now.items()
            )
            file.flush()
            idle = idle + 1 if now["RayTrainWorker"][1] == 0 else 0
            time.sleep(args.every)
    end, last = rows[-1]
    print(f"after {end / 60:.1f} min: role, CPU-seconds, share of a core")
    for role in ROLES:
        print(f"  {role:<17} {last[role][0]:>9.1f} s  {last[role][0] / max(end, 1e-9):6.1%}")


if __name__ == "__main__":
    main()
