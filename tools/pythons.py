"""Every Python the package claims, checked as a user meets it (CI runs this).

    python3 -m tools.pythons            # every claimed Python
    python3 -m tools.pythons 3.13       # some of them
    python3 -m tools.pythons --list     # the claimed versions, one a line

The claimed versions are the minor versions that ``requires-python`` in ``pyproject.toml``
admits (so it must have an upper bound: a claim CI cannot check is not made). For each, with
the newest interpreter of that version found under pyenv (or ``pythonX.Y`` on PATH):

1. a fresh venv in a temporary folder, and ``pip install '.[test]'`` into it from a copy of the
   sources (a real install, not an editable one, so what the package ships is what runs
   below; what pip needs comes from the package index);
2. the fast tier of the tests (``-m "not server and not slow"``, no server binary);
3. an import of every module of both packages from the installed copy;
4. the quick start, ``python -m codemojex.run`` (``tools/quickstart.py``): first screen, the
   page answers, Ctrl-C stops it cleanly.

One line per step; exit 1 at the first failure, with the step's output.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("echomq_trio", "codemojex", "servicekit")
FAST_TIER = ["-m", "pytest", "-q", "-m", "not server and not slow", "-p", "no:cacheprovider"]
INSTALL_TIMEOUT_S = 900
STEP_TIMEOUT_S = 600


def claimed(requires: str) -> list[str]:
    """The ``3.N`` versions a ``requires-python`` specifier admits (3.0 to 3.99).
    ValueError if it admits every future version: CI could not check them."""
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(requires)
    versions = [f"3.{n}" for n in range(100) if spec.contains(f"3.{n}")]
    if not versions:
        raise ValueError(f"requires-python {requires!r} admits no Python 3 version")
    if versions[-1] == "3.99":
        raise ValueError(f"requires-python {requires!r} has no upper bound")
    return versions


def requires_python() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    value: str = project["requires-python"]
    return value


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", path.name))


def find_python(version: str) -> str | None:
    """The newest interpreter of ``version`` (``3.12``): under pyenv's root, else on PATH."""
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    found = sorted(Path(root, "versions").glob(f"{version}.*"), key=_version_key, reverse=True)
    candidates = [str(p / "bin" / f"python{version}") for p in found if p.name[-1].isdigit()]
    candidates += [c for c in (shutil.which(f"python{version}"),) if c]
    for path in candidates:
        try:
            done = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=30)  # fmt: skip
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == str(tuple(map(int, version.split(".")))):
            return path
    return None


def module_names() -> list[str]:
    """Every module and package of both packages, found by walking the imported packages'
    folders (so, run from outside the repository, those of the installed copy)."""
    import importlib
    import pkgutil

    names: list[str] = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        names.append(name)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, name + ".")]
    return sorted(names)


def import_all() -> int:
    """Import every module; print how many and from where, or the first that fails."""
    import importlib

    names = module_names()
    for name in names:
        importlib.import_module(name)
    where = Path(importlib.import_module(PACKAGES[0]).__file__ or "?").parent.parent
    print(f"{len(names)} modules import, from {where}")
    return 0


class StepFailed(Exception):
    pass


def step(what: str, argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> str:
    """Run one step; its last line of output, or StepFailed with the whole output."""
    t0 = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise StepFailed(f"{what}: no end in {timeout:.0f} s") from exc
    took = time.monotonic() - t0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    if done.returncode != 0:
        shown = [line for line in lines if not line.startswith("WARNING: Location")]
        raise StepFailed(f"{what}: exit status {done.returncode}\n" + "\n".join(shown[-60:]))
    return f"{what} ({took:.0f} s)"


def source_copy(scratch: Path) -> Path:
    """What a build reads (``pyproject.toml``, the README, both packages' files that git tracks
    or would: not ignored ones), copied to ``scratch/src``: a build never sees a stale
    ``build/`` folder or writes into the repository."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
         "pyproject.toml", "README.md", *PACKAGES],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    src = scratch / "src"
    for name in filter(None, listed):
        if (ROOT / name).is_file():  # a deleted file not yet committed is still listed
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    return src


def check(version: str, python: str, scratch: Path, src: Path) -> Iterator[str]:
    """The four steps on one interpreter, a line as each one ends; StepFailed at the first
    that fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    venv = scratch / f"venv-{version}"
    yield step("venv", [python, "-m", "venv", str(venv)], cwd=scratch, env=env, timeout=120)
    vpython = str(venv / "bin" / "python")
    install = [vpython, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    yield step("pip install '.[test]'", [*install, f"{src}[test]"],
               cwd=scratch, env=env, timeout=INSTALL_TIMEOUT_S)  # fmt: skip
    fast_env = env | {"ECHOMQ_SERVER_BIN": "/nonexistent/no-server"}
    done = subprocess.run([vpython, *FAST_TIER], cwd=ROOT, env=fast_env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)  # fmt: skip
    tail = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0:
        raise StepFailed("fast tier failed:\n" + "\n".join(tail[-80:]) + done.stderr[-4000:])
    yield "fast tier: " + (tail[-1].strip("= ") if tail else "?")
    here = Path(__file__).resolve()
    done = subprocess.run([vpython, str(here), "--import-all"], cwd=scratch, env=env,
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)  # fmt: skip
    if done.returncode != 0:
        raise StepFailed("import of every module failed:\n" + done.stdout + done.stderr[-4000:])
    yield done.stdout.strip()
    done = subprocess.run([vpython, str(here.parent / "quickstart.py")], cwd=scratch, env=env,
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)  # fmt: skip
    if done.returncode != 0:
        raise StepFailed(done.stdout + done.stderr[-4000:])
    yield done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", help="3.N versions to check (default: all claimed)")
    parser.add_argument("--list", action="store_true", help="print the claimed versions")
    parser.add_argument("--import-all", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.import_all:
        return import_all()
    versions = claimed(requires_python())
    if args.list:
        print("\n".join(versions))
        return 0
    unknown = set(args.versions) - set(versions)
    if unknown:
        parser.error(f"not claimed by requires-python {requires_python()!r}: {sorted(unknown)}")
    wanted = args.versions or versions
    pythons = {v: find_python(v) for v in wanted}
    missing = [v for v, p in pythons.items() if p is None]
    if missing:
        print(f"pythons: no interpreter found for {', '.join(missing)} (pyenv or PATH)")
        return 1
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pythons-") as scratch:
        src = source_copy(Path(scratch))
        for version, python in pythons.items():
            assert python is not None
            asked = [python, "-c", "import platform; print(platform.python_version())"]
            real = subprocess.run(asked, capture_output=True, text=True).stdout.strip()
            print(f"Python {real} ({python}):", flush=True)
            try:
                for line in check(version, python, Path(scratch), src):
                    print(f"  {line}", flush=True)
            except StepFailed as exc:
                print(f"  FAILED: {exc}", flush=True)
                return 1
            shutil.rmtree(Path(scratch) / f"venv-{version}", ignore_errors=True)
    print(f"pythons: {', '.join(wanted)} checked in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
