"""What ``pip install flowcore`` (no extras) brings, and how long ``import flowcore`` takes.

    python benchmarks/install_footprint.py TREE [TREE ...] [--repeats 7] [--python python3.11]

For each source tree (a checkout of flowcore; ``git archive REV | tar -x -C
DIR`` gives an older one), a fresh virtual environment is made in a temporary
directory (``python3.11 -m venv``) and the tree installed into it with ``pip
install TREE``, no extras, from the package registry pip is configured with.
Printed per tree: the distributions installed (``name==version``, pip and
setuptools left out), their number and the size of the environment's
site-packages; whether the ``flowcore`` command runs (``flowcore --help``, its exit
code and first line); the libraries each import loads; then, side by side, the
median over the repeats of the wall time and the CPU time (user + system:
what the import costs, whatever else holds the cores) of ``python -c pass``
(the floor), ``python -c "import flowcore"`` and ``python -c "import
flowcore.testing"``, each a fresh process, and the import time ``-X
importtime`` reports for the statement (the cumulative time of every module
imported at the top level that the interpreter's own start does not import).
An import that fails is shown with the last line it printed, not timed.

The trees' timings alternate, run by run, so that both see the same load on
the machine; one untimed run of each first leaves the bytecode cache as an
installed package has it. The environments are removed at the end (``--keep``
keeps them and prints where).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# What each timed case runs: ``python -c CODE``; the module whose import time
# ``-X importtime`` reports (None: the floor).
CASES: dict[str, tuple[str, str | None]] = {
    "python -c pass (floor)": ("pass", None),
    "import flowcore": ("import flowcore", "flowcore"),
    "import flowcore.testing": ("import flowcore.testing", "flowcore.testing"),
}
LEFT_OUT = {"pip", "setuptools"}
# Printed after an import: the top-level modules loaded that are neither the
# standard library's nor flowcore's own.
LOADED = (
    "import sys; print(' '.join(sorted({m.split('.')[0] for m in sys.modules}"
    " - set(sys.stdlib_module_names) - {'flowcore', '__main__'}"
    " - {m for m in sys.modules if m.startswith('_')})))"
)


@dataclass
class Env:
    """One tree installed in its own virtual environment, and what was measured in it."""

    tree: Path
    root: Path
    dists: list[str] = field(default_factory=list)
    site_bytes: int = 0
    command: str = ""
    walls: dict[str, list[float]] = field(default_factory=dict)
    cpus: dict[str, list[float]] = field(default_factory=dict)
    importtimes: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    loads: dict[str, str] = field(default_factory=dict)  # what each import loads besides
    start_modules: set[str] = field(default_factory=set)  # imported by the interpreter's start

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")


def run(
    args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, env=env, cwd=cwd)


def install(tree: Path, root: Path, python: str) -> Env:
    """A fresh environment at ``root`` with ``tree`` installed, no extras."""
    env = Env(tree=tree, root=root)
    for step in (
        [python, "-m", "venv", str(root)],
        [env.python, "-m", "pip", "install", str(tree)],
    ):
        done = run(step)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(step)} failed:\n{done.stdout}\n{done.stderr}")
    listed = run([env.python, "-m", "pip", "list", "--format=freeze"]).stdout.split()
    env.dists = sorted(
        (line for line in listed if line.split("==")[0].lower() not in LEFT_OUT),
        key=str.lower,
    )
    site = run([env.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    env.site_bytes = sum(
        p.stat().st_size for p in Path(site.stdout.strip()).rglob("*") if p.is_file()
    )
    for label, (code, _) in CASES.items():
        if code != "pass":
            loaded = run([env.python, "-c", code + "; " + LOADED], cwd=root)
            env.loads[label] = loaded.stdout.strip() or f"fails: {loaded.stderr.strip()[-200:]}"
    helped = run([str(root / "bin" / "flowcore"), "--help"])
    first = (helped.stdout or helped.stderr).strip().splitlines()[:1]
    env.command = f"exit {helped.returncode}: {first[0] if first else '(nothing printed)'}"
    return env


def top_level_us(stderr: str) -> dict[str, int]:
    """The cumulative microseconds ``-X importtime`` gives each module imported at the top
    (not by another module)."""
    found: dict[str, int] = {}
    for line in stderr.splitlines():
        name = line.rsplit("|", 1)[-1]
        if line.startswith("import time:") and name[:1] == " " and name[1:2] not in (" ", ""):
            cumulative = line.split("|")[1].strip()
            if cumulative.isdigit():
                found[name.strip()] = int(cumulative)
    return found


def timed_run(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, float, float, str]:
    """Exit code, wall seconds, CPU seconds (user + system, from ``wait4``) and stderr."""
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = code = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        err.seek(0)
        return code, wall, usage.ru_utime + usage.ru_stime, err.read()


def measure(env: Env, label: str) -> None:
    """One timed run of the case (wall clock and CPU), and one under ``-X importtime``."""
    code, module = CASES[label]
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    exit_code, wall, cpu, stderr = timed_run([env.python, "-c", code], clean, env.root)
    if exit_code != 0:
        lines = stderr.strip().splitlines()
        env.failures[label] = lines[-1] if lines else f"exit {exit_code}"
        return
    env.walls.setdefault(label, []).append(wall)
    env.cpus.setdefault(label, []).append(cpu)
    timed = run([env.python, "-X", "importtime", "-c", code], env=clean, cwd=env.root)
    top = top_level_us(timed.stderr)
    if module is None:
        env.start_modules = set(top)
    else:  # what the statement imports: the top-level imports the interpreter's start does not
        us = sum(v for k, v in top.items() if k not in env.start_modules)
        env.importtimes.setdefault(label, []).append(us / 1e6)


def table(envs: list[Env]) -> None:
    width = max(16, *(len(e.tree.name) + 2 for e in envs))
    print(f"{'median of the runs, ms':<36}" + "".join(f"{e.tree.name:>{width}}" for e in envs))
    for label, (_, module) in CASES.items():
        for what in ("wall", "CPU", "importtime"):
            if what == "importtime" and module is None:
                continue
            cells = []
            for e in envs:
                figures = {"wall": e.walls, "CPU": e.cpus, "importtime": e.importtimes}[what]
                if label in e.failures or not figures.get(label):
                    cells.append("fails" if label in e.failures else "-")
                else:
                    cells.append(f"{statistics.median(figures[label]) * 1000:.0f}")
            print(f"{label + ', ' + what:<36}" + "".join(f"{c:>{width}}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--python", default="python3.11", help="the interpreter to make venvs of")
    parser.add_argument("--keep", action="store_true", help="keep the environments")
    args = parser.parse_args()
    python = shutil.which(args.python) or args.python
    tmp = Path(tempfile.mkdtemp(prefix="flowcore-install-"))
    try:
        envs = []
        for i, tree in enumerate(args.trees):
            print(f"installing {tree} ...", file=sys.stderr, flush=True)
            envs.append(install(tree.resolve(), tmp / f"venv{i}", python))
        for env in envs:
            print(f"== {env.tree}: pip install {env.tree.name} (no extras)")
            print(
                f"{len(env.dists)} distributions, site-packages {env.site_bytes / 2**20:.1f} MiB:"
            )
            for dist in env.dists:
                print(f"  {dist}")
            for label, loaded in env.loads.items():
                print(f"{label} loads (besides the standard library): {loaded}")
            print(f"flowcore --help: {env.command}")
        for env in envs:  # untimed: the first start of each
            for label in CASES:
                measure(env, label)
            env.walls.clear()
            env.cpus.clear()
            env.importtimes.clear()
        for _ in range(args.repeats):
            for label in CASES:
                for env in envs:  # alternating: each case in each tree before the next
                    measure(env, label)
        print(f"== import, {args.repeats} runs each, fresh processes, the trees alternating")
        table(envs)
        for env in envs:
            for label, last in env.failures.items():
                print(f"{env.tree.name}: {label} fails: {last}")
    finally:
        if args.keep:
            print(f"environments kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
