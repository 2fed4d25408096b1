"""Linux namespaces for one generation of ranks: its own PIDs, mounts and network.

A cell (cell.py) calls these between its fork from the zygote and the first rank it forks:

* PID namespace: the cell's first child is PID 1 of a new namespace and every rank (and everything a
  rank starts) lives inside it. Killing that PID 1 makes the kernel kill the whole namespace, so a
  process that forks and exits faster than any tree walk still dies with its generation.
* Mount namespace: private, size-capped tmpfs over /tmp, /var/tmp and /dev/shm (nothing a candidate
  writes there outlives the generation or is seen by another one), the generation's own directory
  bound back in at its usual path, every other mount read-only (the judge's sources, the Python
  installation, the user's files), and a fresh /proc that shows only the generation's processes.
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
import socket
import struct

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE = 1024, 2048, 4096, 16384, 1 << 18
MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
# Per-mount options that a read-only remount must keep (in a user namespace, dropping one is refused).
KEPT_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
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


def private_filesystem(workdir: str, scratch: list[tuple[str, int]], keep: list[str]) -> list[str]:
    """Cover each (path, bytes) of `scratch` with a fresh tmpfs, keep `workdir`, make the rest read-only.

    `keep` lists what the ranks need that may live under a covered path (the Python install, the judge's
    code: a checkout in /tmp is common); each is bound back, read-only, at its own path.
    Returns the mount points that could not be made read-only (normally none).
    """
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the host's mount table
    existing = mount_points()
    covering = [path for path, _ in scratch if os.path.isdir(path)]
    held = {path: os.open(path, os.O_PATH) for path in _outermost(keep) if _under(path, covering)}
    workdir_fd = os.open(workdir, os.O_PATH | os.O_DIRECTORY)
    covered = []
    for path, size in scratch:
        if not os.path.isdir(path) or _under(path, covered):
            continue
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
        covered.append(path)
        for kept in [k for k in held if _under(k, [path])]:
            _bind(held.pop(kept), kept, MS_RDONLY | _options_at(kept, existing))
    _bind(workdir_fd, workdir, 0)  # its own mount: stays writable below
    refused = []
    for point, flags in existing:
        if _under(point, covered) or _under(point, ["/proc"]):
            continue  # hidden under a tmpfs now, or replaced with the new /proc
        try:
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError:
            refused.append(point)
    return refused


def _bind(fd: int, path: str, flags: int) -> None:
    """Mount what `fd` holds at `path` (created in the new tmpfs when missing), with `flags` if any."""
    directory = os.path.isdir(f"/proc/self/fd/{fd}")
    if not os.path.exists(path):
        old = os.umask(0o022)
        try:
            os.makedirs(path if directory else os.path.dirname(path), exist_ok=True)
            if not directory:
                open(path, "a").close()
        finally:
            os.umask(old)
    mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    os.close(fd)
    if flags:
        mount(None, path, None, MS_REMOUNT | MS_BIND | flags)


def _options_at(path: str, points: list[tuple[str, int]]) -> int:
    """The kept options of the mount that holds `path` (the longest mount point above it)."""
    best = max((p for p in points if _under(path, [p[0]])), key=lambda p: len(p[0]), default=("/", 0))
    return best[1]


def _outermost(paths: list[str]) -> list[str]:
    """Existing absolute paths, without those inside another one of them."""
    found = sorted({os.path.normpath(p) for p in paths if p and os.path.isabs(p) and os.path.exists(p)})
    return [p for i, p in enumerate(found) if not _under(p, found[:i])]


def mount_proc() -> None:
    """A /proc for the new PID namespace (call from its PID 1), with the machine's knobs read-only."""
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path in PROC_READ_ONLY:
        if os.path.exists(path):
            mount(path, path, None, MS_BIND | MS_REC)
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


def mount_points() -> list[tuple[str, int]]:
    """(mount point, options to keep) for every mount this process sees, parents before children."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = _unescape(fields[4])
            flags = 0
            for option in fields[5].split(","):
                flags |= KEPT_OPTIONS.get(option, 0)
            points.append((point, flags))
    return points


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040 ...)."""
    return path.encode().decode("unicode_escape").encode("latin-1").decode(errors="surrogateescape")


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def probe() -> str | None:
    """None where this process may create a cell's namespaces, else why not (tried in a throwaway child)."""
    if not os.uname().sysname == "Linux":
        return f"unavailable on {os.uname().sysname}"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            unshare(user=os.geteuid() != 0)
            os.write(write_end, b"ok")
        except BaseException as exc:
            os.write(write_end, str(exc).encode()[:4000] or b"error")
        os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 4096)
    os.close(read_end)
    os.waitpid(pid, 0)
    return None if answer == b"ok" else answer.decode(errors="replace")
