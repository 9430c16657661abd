"""Where a run's numbers come from: fedhet's version and commit, the machine's kernels, the code the run imported.

A run's numbers depend on its inputs, on fedhet's code and on the CPU's kernels (torch picks its vectorised kernels
by :func:`torch.backends.cpu.get_cpu_capability`, and a float32 sum changes with their width and with the number of
threads). What a run records of them:

- :func:`source_tree`: fedhet's version and the git commit of the source tree the imported ``fedhet`` package lives
  in, whatever the working directory (a suite run from a folder outside the repository names the commit of the
  fedhet it ran), and whether that package's files had uncommitted changes;
- :func:`environment`: the environment fingerprint, torch's version and build, the CPU capability torch dispatches
  to, the CPU model, Python and the operating system; :func:`environment_id` names it in 12 hex digits;
- :func:`module_digests`: the sha256 of every source file of fedhet, and of the user packages a config names by
  ``class_path``, that the process imported: what a run's result is stale after;
- :func:`files_read`: the sha256 of every data file the process's datasets read (:func:`note_read`), named by
  :func:`repo_label`: its path in its git work tree, never a folder of the machine.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = "fedhet"
OUTSIDE = "<outside>"
"""The label prefix of a file outside any git work tree and outside the fedhet package (only its name is kept)."""

_READ: dict[str, str] = {}  # the data files this process read: label -> sha256


@dataclass(frozen=True)
class SourceTree:
    """The fedhet a process runs.

    Attributes:
        version: ``fedhet.__version__``.
        commit: the git commit of the work tree holding the imported package (``"unknown"`` outside one).
        dirty: whether the package's files differ from that commit (uncommitted changes under its folder).

    """

    version: str
    commit: str
    dirty: bool


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True, timeout=30)
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return done.stdout


@functools.lru_cache(maxsize=1)
def source_tree() -> SourceTree:
    """The version, commit and dirty flag of the imported ``fedhet`` package's source tree (once per process).

    The commit is read from the git work tree around the package's folder, not the working directory's; an
    installed copy outside any work tree records the commit pip recorded (``direct_url.json``), else ``unknown``.
    """
    package = sys.modules[PACKAGE]  # imported before any of its subpackages; not imported here (import layers)
    folder, version = Path(str(package.__file__)).resolve().parent, str(package.__version__)
    head = _git(folder, "rev-parse", "HEAD")
    if head is None:
        return SourceTree(version, _installed_commit(), False)
    status = _git(folder, "status", "--porcelain", "--untracked-files=no", "--", ".")
    return SourceTree(version, head.strip(), bool(status and status.strip()))


def _installed_commit() -> str:
    """The commit an installer recorded for the ``fedhet`` distribution (PEP 610 ``vcs_info``), else ``unknown``."""
    from importlib import metadata

    try:
        text = metadata.distribution(PACKAGE).read_text("direct_url.json")
        commit = json.loads(text or "{}").get("vcs_info", {}).get("commit_id")
    except (metadata.PackageNotFoundError, ValueError, AttributeError):
        return "unknown"
    return str(commit) if commit else "unknown"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS), else the platform's processor."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Hardware", "Model")) and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        name = _sysctl("machdep.cpu.brand_string")
        if name:
            return name
    return platform.processor() or platform.machine()


def _sysctl(key: str) -> str | None:
    try:
        return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


@functools.lru_cache(maxsize=1)
def environment() -> dict[str, str]:
    """The environment fingerprint: what, besides its inputs and fedhet's code, decides a run's float results.

    Returns:
        ``torch`` (version), ``torch_build`` (torch's git commit and whether it is a debug build),
        ``cpu_capability`` (``torch.backends.cpu.get_cpu_capability()``: the kernel family, e.g. ``AVX2``,
        ``AVX512``, ``DEFAULT`` under ``ATEN_CPU_CAPABILITY=default``), ``cpu`` (model), ``python`` and ``os``.
        The number of threads, which a run sets, is recorded beside it.

    """
    import torch  # here, not at the top: a suite's parent process reads provenance without torch

    return {
        "torch": torch.__version__,
        "torch_build": f"{torch.version.git_version}{' debug' if torch.version.debug else ''}",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
    }


def environment_id(env: Mapping[str, Any]) -> str:
    """A 12-hex-digit name of an environment fingerprint (and threads, when given): equal names, equal kernels."""
    return hashlib.sha256(json.dumps(dict(env), sort_keys=True).encode()).hexdigest()[:12]


def user_packages(class_paths: Iterable[str]) -> set[str]:
    """The top-level packages of the classes ``class_paths`` name outside fedhet (a config's ``class_path`` values)."""
    found = set()
    for path in class_paths:
        top = path.split(".", 1)[0]
        if "." in path and top and top != PACKAGE:
            found.add(top)
    return found


def file_sha256(path: str | Path) -> str:
    """The sha256 hex digest of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def module_digests(packages: Iterable[str] = ()) -> dict[str, str]:
    """``module name -> sha256 of its source file`` for the modules of fedhet and ``packages`` this process imported.

    Read from ``sys.modules`` (at the end of a run: everything the run imported, its method's module, callbacks and
    maths, the engine, its data module); modules without a source file (built-ins, namespace packages) are left out.
    The standard library and third-party packages are not listed: their versions are the environment's.
    """
    tops = {PACKAGE, *packages}
    digests = {}
    for name, module in sorted(sys.modules.items()):
        if name.split(".", 1)[0] not in tops or module is None:
            continue
        source = getattr(module, "__file__", None)
        if source is None or not source.endswith(".py"):
            continue
        try:
            digests[name] = file_sha256(source)
        except OSError:
            continue
    return digests


def digest_of(digests: Mapping[str, str]) -> str:
    """One sha256 over a ``name -> sha256`` mapping (keys sorted)."""
    return hashlib.sha256(json.dumps(dict(digests), sort_keys=True).encode()).hexdigest()


def _module_origin(name: str, search: list[str]) -> Path | None:
    """Where the top-level module or package ``name`` would be imported from (``search`` first), not importing it."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec(name, [*search, *sys.path])
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin) if spec.origin else None


def user_code_digests(class_paths: Iterable[str], search: Iterable[str | Path] = ()) -> dict[str, str]:
    """``file -> sha256`` of the user code that ``class_paths`` name: every ``.py`` file of each named package.

    A class path outside fedhet (``mydata.sites.SiteFederation``) names the top-level package ``mydata``: every Python
    file under its folder counts (so a helper module the data module imports counts too); a top-level module file
    counts alone. Found as ``python -m fedhet`` would import it (``search``, then ``sys.path``), without importing it.
    Keys are paths relative to the package's parent folder (the same wherever it lives); a name not found is left out
    (the run that imports it fails first).
    """
    where = [str(p) for p in search]
    digests = {}
    for top in sorted(user_packages(class_paths)):
        origin = _module_origin(top, where)
        if origin is None:
            continue
        files = sorted(origin.rglob("*.py")) if origin.is_dir() else [origin]
        for path in files:
            if path.is_file() and "__pycache__" not in path.parts:
                digests[path.relative_to(origin.parent).as_posix()] = file_sha256(path)
    return digests


@functools.lru_cache(maxsize=256)
def _work_tree(folder: str) -> Path | None:
    top = _git(Path(folder), "rev-parse", "--show-toplevel")
    return Path(top.strip()).resolve() if top and top.strip() else None


def repo_label(path: str | os.PathLike[str]) -> str:
    """How a run record names a file: its path in its git work tree, with no folder of the machine in it.

    A file in no work tree is named from the fedhet package's parent folder when it lies in the package (an
    installed copy's bundled data: ``fedhet/datamodules/datasets/data/...``), else ``<outside>/<name>``.
    """
    resolved = Path(path).resolve()
    top = _work_tree(str(resolved.parent)) if resolved.parent.is_dir() else None
    if top is not None and resolved.is_relative_to(top):
        return resolved.relative_to(top).as_posix()
    parent = Path(str(sys.modules[PACKAGE].__file__)).resolve().parent.parent
    if resolved.is_relative_to(parent):
        return resolved.relative_to(parent).as_posix()
    return f"{OUTSIDE}/{resolved.name}"


def note_read(path: str | os.PathLike[str], content: bytes) -> None:
    """Note that this process read the data file ``path`` (its bytes ``content``): the run record lists it."""
    _READ[repo_label(path)] = hashlib.sha256(content).hexdigest()


def files_read() -> dict[str, str]:
    """``label -> sha256`` of the data files this process read so far (:func:`note_read`)."""
    return dict(sorted(_READ.items()))
