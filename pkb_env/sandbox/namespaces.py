"""Linux namespaces for one rank set of ranks: its own PIDs, mounts and network.

A cell (cell.py) calls these between its fork from the zygote and the first rank it forks:

* PID namespace: the cell's first child is PID 1 of a new namespace and every rank (and everything a
  rank starts) lives inside it. Killing that PID 1 makes the kernel kill the whole namespace, so a
  process that forks and exits faster than any tree walk still dies with its rank set.
* Mount namespace: the cell builds an allowlisted root in it (rootfs.py: only what the ranks need,
  read-only; private tmpfs scratch space; the rank set's own directory) and pivots into it; a fresh
  /proc shows only the rank set's processes.
* Network namespace: loopback only; ranks still talk to each other over it.
* User namespace, only where the judge is not root: it is what lets an unprivileged user create the
  others. The uid and gid map to themselves, so files keep their owners.

Root is needed for the first three, or unprivileged user namespaces (most distributions allow them;
Ubuntu 24.04's AppArmor policy may not). What could not be applied is reported, never silently skipped.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import platform
import re
import socket
import struct

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE = 1024, 2048, 4096, 16384, 1 << 18
MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
# Per-mount options that a read-only remount must keep (in a user namespace, dropping one is refused).
KEPT_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")
MNT_DETACH = 2
PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
# Parts of /proc that configure the machine rather than describe a process: read-only, as containers do.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")

_libc = ctypes.CDLL(None, use_errno=True)


class NamespaceError(OSError):
    """A namespace step failed; the message names the step."""


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise NamespaceError(errno, f"{what}: {os.strerror(errno)}")


def unshare(user: bool) -> None:
    """New PID (for children), mount and network namespaces; a user namespace first when `user`."""
    flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | (CLONE_NEWUSER if user else 0)
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(flags), "unshare(pid, mount, network" + (", user)" if user else ")"))
    if user:  # map our ids to themselves: files we create keep their owner; we gain no real privilege
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {fstype or source or ''} on {target}")


def mount_proc(at: str = "/proc") -> None:
    """A /proc for the new PID namespace at `at` (call from its PID 1), with the machine's knobs read-only."""
    mount("proc", at, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path in PROC_READ_ONLY:
        path = at + path.removeprefix("/proc")
        if os.path.exists(path):
            mount(path, path, None, MS_BIND | MS_REC)
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def pivot_root(new_root: str, put_old: str) -> None:
    """pivot_root(2) (glibc has no wrapper): `new_root` becomes "/", the old root moves to `put_old`."""
    number = PIVOT_ROOT_SYSCALL.get(platform.machine())
    if number is None:
        raise NamespaceError(0, f"pivot_root: no syscall number known for {platform.machine()}")
    _check(_libc.syscall(ctypes.c_long(number), new_root.encode(), put_old.encode()), f"pivot_root {new_root}")


def detach(target: str) -> None:
    """Unmount `target` and everything below it, lazily (umount2 with MNT_DETACH)."""
    _check(_libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


def mount_points(proc: str = "/proc") -> list[tuple[str, int]]:
    """(mount point, options to keep) for every mount this process sees, parents before children.

    `proc`: where a procfs is mounted (a cell building its root finds the host's under the old root).
    """
    points = []
    with open(f"{proc}/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = _unescape(fields[4])
            flags = 0
            for option in fields[5].split(","):
                flags |= KEPT_OPTIONS.get(option, 0)
            points.append((point, flags))
    return points


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040 ...).

    No codec lookups here: a cell reads mountinfo while no Python install is mounted to import one from.
    """
    return OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), path)


def under(path: str, roots: list[str]) -> bool:
    """`path` is one of `roots` or inside one of them (plain string paths, no symlinks resolved)."""
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def probe() -> str | None:
    """None where this process may create a cell's namespaces, else why not.

    Tried in a fresh interpreter (fork and exec), not in a fork of this one: the judge may run threads
    (CUDA, wandb, a trainer's), and a forked copy of a multi-threaded process may deadlock on a lock one
    of them held. The child loads only this module (standard library only) and exits.
    """
    if not os.uname().sysname == "Linux":
        return f"unavailable on {os.uname().sysname}"
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _PROBE, __file__], capture_output=True,
                              timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the namespace probe did not run ({type(exc).__name__}: {exc})"
    answer = done.stdout.decode(errors="replace").strip()
    return None if answer == "ok" else (answer or done.stderr.decode(errors="replace").strip()[-4000:] or "error")


_PROBE = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("pkb_namespaces_probe", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
try:
    module.unshare(user=os.geteuid() != 0)
    print("ok")
except BaseException as exc:
    print(str(exc)[:4000] or "error")
"""
