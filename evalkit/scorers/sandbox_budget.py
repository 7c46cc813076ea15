"""One memory and process budget for a whole ``python_tests`` sandbox: its own cgroup.

``RLIMIT_AS`` caps each process, so eight processes may hold eight times ``memory_mb``, and
``RLIMIT_NPROC`` counts per real user and does not bind root at all. A cgroup caps the *sum*:
every process the sandbox starts is in it, and ``memory`` (RAM, swap and the tmpfs it writes)
and ``pids`` are charged together. The mechanism is probed once and recorded in the run
manifest (:func:`mechanism`):

* ``cgroup2``: a cgroup v2 subtree this process may create children in, with the ``memory`` and
  ``pids`` controllers delegated (``memory.max``, ``memory.swap.max``, ``pids.max``);
* ``cgroup1``: the v1 ``memory`` and ``pids`` hierarchies, writable (``memory.limit_in_bytes``,
  ``memory.memsw.limit_in_bytes``, ``pids.max``);
* ``uid``: no cgroup, but evalkit runs as a non-root user, whose mapped uid makes the per-process
  ``RLIMIT_NPROC`` bind (memory stays a per-process cap);
* ``None``: none of these: the sandbox fails closed, naming why.

The sandbox's first process joins the cgroup(s) before it ``exec``\\ s ``unshare`` (a shell line,
:meth:`Budget.join`), so nothing of the model's ever runs outside it. Afterwards the parent reads
whether a limit was hit (:meth:`Budget.exceeded`), kills whatever is left and removes the group.

A group's name carries its owner (:func:`owner`: the evalkit process's pid and start time). An
owner killed outright (``kill -9``) removes nothing; the next evalkit process to start a sandbox
kills and removes every group whose owner is gone (:func:`sweep`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP2, CGROUP1, UID = "cgroup2", "cgroup1", "uid"
_PREFIX = "evalkit-sandbox-"


@dataclass(frozen=True)
class Budget:
    """The cgroup directories of one sandbox run (one for v2; memory and pids for v1)."""

    kind: str
    dirs: tuple[Path, ...]

    @property
    def procs_files(self) -> tuple[str, ...]:
        """The ``cgroup.procs`` files the sandbox's first process writes its pid to."""
        return tuple(str(d / "cgroup.procs") for d in self.dirs)

    def exceeded(self) -> str | None:
        """``memory`` when the kernel killed a process for the memory limit, ``processes`` when
        a fork was refused at the process limit, else None (memory first: it is the cause of
        the two when both happen)."""
        if self.kind == CGROUP2:
            memory = _counter(self.dirs[0] / "memory.events", "oom_kill")
            processes = _counter(self.dirs[0] / "pids.events", "max")
        else:
            memory = _counter(self.dirs[0] / "memory.oom_control", "oom_kill")
            processes = _counter(self.dirs[1] / "pids.events", "max")
        if memory:
            return "memory"
        return "processes" if processes else None

    def close(self) -> None:
        """Kill every process still in the group, then remove it (a group with members cannot
        be removed; the kernel may take a moment to reap them after SIGKILL)."""
        for directory in self.dirs:
            kill = directory / "cgroup.kill"
            for _ in range(200):
                pids = _members(directory)
                if not pids:
                    break
                if kill.exists():
                    _write(kill, "1")
                else:
                    for pid in pids:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(pid, signal.SIGKILL)
                time.sleep(0.005)
            for _ in range(200):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY until the last member is reaped
                    time.sleep(0.005)


def create(memory_bytes: int, max_processes: int) -> Budget | None:
    """A new cgroup for one sandbox run with both limits set, or None without cgroups.

    ``OSError`` when a probed cgroup could not be set up this time (the caller fails closed).
    """
    kind = mechanism()
    if kind not in (CGROUP2, CGROUP1):
        return None
    name = f"{_PREFIX}{owner()}-{secrets.token_hex(6)}"
    parents = _parents()
    dirs = tuple(parent / name for parent in parents)
    budget = Budget(kind, dirs)
    try:
        for directory in dirs:
            directory.mkdir()
        if kind == CGROUP2:
            _write(dirs[0] / "memory.max", str(memory_bytes))
            _write(dirs[0] / "memory.swap.max", "0")
            _write(dirs[0] / "pids.max", str(max_processes))
            _write(dirs[0] / "memory.oom.group", "1")  # a memory kill takes the whole sandbox
        else:
            _write(dirs[0] / "memory.limit_in_bytes", str(memory_bytes))
            memsw = dirs[0] / "memory.memsw.limit_in_bytes"
            if memsw.exists():  # swap accounting on: RAM + swap together, so no swap at all
                _write(memsw, str(memory_bytes))
            _write(dirs[1] / "pids.max", str(max_processes))
    except OSError:
        budget.close()
        raise
    return budget


def owner(pid: int | None = None) -> str:
    """Who owns a sandbox's leftovers: ``PID.START`` (the process's start time in clock ticks
    after boot, so a reused pid is another owner)."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{_start_time(pid)}"


def owner_alive(tag: str) -> bool | None:
    """Whether the owner ``tag`` names still runs (None: not an owner tag)."""
    pid, dot, start = tag.partition(".")
    if not (dot and pid.isdigit() and start.isdigit()):
        return None
    return _start_time(int(pid)) == int(start)


def owner_of(name: str, prefix: str) -> str | None:
    """The owner tag in a leftover's name ``PREFIX + OWNER + '-' + random``."""
    if not name.startswith(prefix):
        return None
    tag = name[len(prefix) :].partition("-")[0]
    return tag if owner_alive(tag) is not None else None


def sweep() -> int:
    """Kill and remove the sandbox cgroups of evalkit processes that are gone; how many."""
    if mechanism() not in (CGROUP2, CGROUP1):
        return 0
    removed = 0
    for parent in _parents():
        with contextlib.suppress(OSError):
            for directory in parent.iterdir():
                tag = owner_of(directory.name, _PREFIX)
                if tag is not None and not owner_alive(tag) and directory.is_dir():
                    Budget(mechanism() or CGROUP2, (directory,)).close()
                    removed += not directory.exists()
    return removed


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


@functools.cache
def mechanism() -> str | None:
    """Which mechanism bounds the sandbox's processes (and memory) on this machine; probed once."""
    if _parents_v2() is not None:
        return CGROUP2
    if _parents_v1() is not None:
        return CGROUP1
    if os.geteuid() != 0:
        return UID
    return None


def problem() -> str | None:
    """Why no budget can be enforced here, or None."""
    if mechanism() is None:
        return (
            "no process budget: no writable cgroup (v2 with memory and pids delegated, or v1) "
            "and evalkit runs as root, where RLIMIT_NPROC does not bind"
        )
    return None


def describe() -> dict[str, str]:
    """What holds the memory and the process budget here, for the run manifest.

    Examples:
        >>> sorted(describe())
        ['memory', 'processes']
    """
    kind = mechanism()
    if kind in (CGROUP2, CGROUP1):
        return {"memory": f"{kind}: the whole sandbox", "processes": f"{kind}: the whole sandbox"}
    if kind == UID:
        return {"memory": "rlimit: each process", "processes": "rlimit: the mapped non-root uid"}
    return {"memory": "none", "processes": "none"}


def _parents() -> tuple[Path, ...]:
    found = _parents_v2() if mechanism() == CGROUP2 else _parents_v1()
    assert found is not None
    return found


@functools.cache
def _parents_v2() -> tuple[Path, ...] | None:
    """This process's own cgroup v2 directory, when a child of it gets memory and pids."""
    mount = _mount_point("cgroup2", None)
    path = _own_path("")
    if mount is None or path is None:
        return None
    parent = mount / path.lstrip("/")
    wanted = {"memory", "pids"}
    if not wanted <= set(_read(parent / "cgroup.subtree_control").split()):
        # Enabling controllers for children works only where the kernel allows it (not in a
        # cgroup that holds processes itself, unless it is the root): try, never insist.
        with contextlib.suppress(OSError):
            _write(parent / "cgroup.subtree_control", "+memory +pids")
        if not wanted <= set(_read(parent / "cgroup.subtree_control").split()):
            return None
    return (parent,) if _can_create(parent) else None


@functools.cache
def _parents_v1() -> tuple[Path, ...] | None:
    """This process's own v1 memory and pids cgroup directories, when both take children."""
    found = []
    for controller in ("memory", "pids"):
        mount, path = _mount_point("cgroup", controller), _own_path(controller)
        if mount is None or path is None:
            return None
        parent = mount / path.lstrip("/")
        if not _can_create(parent):
            return None
        found.append(parent)
    return tuple(found)


def _mount_point(fstype: str, controller: str | None) -> Path | None:
    """Where a cgroup hierarchy is mounted (the v1 one carrying ``controller``), from
    ``/proc/self/mountinfo``; only mounts of the hierarchy's root are usable."""
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] != fstype or fields[3] != "/":
            continue
        if controller is None or controller in tail[2].split(","):
            return Path(fields[4])
    return None


def _own_path(controller: str) -> str | None:
    """This process's cgroup path in the hierarchy of ``controller`` ("" for v2)."""
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if (controller == "" and parts[0] == "0" and parts[1] == "") or (
            controller and controller in parts[1].split(",")
        ):
            return parts[2]
    return None


def _can_create(parent: Path) -> bool:
    probe = parent / (_PREFIX + "probe-" + secrets.token_hex(4))
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def _members(directory: Path) -> list[int]:
    try:
        return [int(pid) for pid in _read(directory / "cgroup.procs").split()]
    except (OSError, ValueError):
        return []


def _counter(path: Path, key: str) -> int:
    for line in _read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)
