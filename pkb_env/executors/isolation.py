"""Isolation of candidate processes beyond resource limits: no network, no root.

* Network: the zygote enters a private network namespace with only a loopback interface (ranks still
  talk to each other over it; gloo and NCCL bootstrap use loopback), so candidate code reaches nothing
  outside the machine and no service of the host. Needs CAP_SYS_ADMIN (root); skipped otherwise.
* Privileges: when the judge runs as root, candidate ranks switch to an unprivileged uid/gid (nobody)
  after setting up, so they cannot signal the judge, read its memory or environment through /proc, or
  write its files and caches. Needs the Python installation to be readable by that uid; skipped, with
  the reason recorded, where it is not (e.g. a venv whose interpreter lives under a 0700 /root).
What was applied is reported in the executor's `isolation` description.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import resource
import socket
import stat
import struct
import sys
import sysconfig

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
NOBODY = 65534


def enter_private_network() -> str:
    """Move this process into a new network namespace with loopback up; returns what happened."""
    if os.environ.get("PKB_ENV_ISOLATE_NETWORK", "1") == "0":
        return "off (PKB_ENV_ISOLATE_NETWORK=0)"
    if not sys.platform.startswith("linux"):
        return f"unavailable on {sys.platform}"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        return f"unavailable ({os.strerror(ctypes.get_errno())})"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
    return "private network namespace (loopback only)"


def unprivileged_uid() -> tuple[int | None, str]:
    """The uid candidates should run as, or None with the reason."""
    if os.environ.get("PKB_ENV_DROP_PRIVILEGES", "1") == "0":
        return None, "off (PKB_ENV_DROP_PRIVILEGES=0)"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None, "not needed (the judge does not run as root)"
    for path in _python_paths():
        blocked = _first_closed_directory(path)
        if blocked:
            return None, f"unavailable: {blocked} is not readable by other users (Python lives under it)"
    return NOBODY, f"candidates run as uid {NOBODY} (nobody)"


def drop_privileges(uid: int, max_processes: int = 1024) -> None:
    """Become `uid` for good; limit how many processes/threads that uid may have (fork bombs)."""
    resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def remove_files_of(uid: int, directories: tuple[str, ...]) -> None:
    """Delete what `uid` left at the top of shared directories (only that uid's entries are touched)."""
    import shutil

    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


def _python_paths() -> list[str]:
    paths = {sys.executable, os.path.realpath(sys.executable), sys.prefix, sys.base_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.add(sysconfig.get_paths()[key])
    return sorted(p for p in paths if p)


def _first_closed_directory(path: str) -> str | None:
    """The first directory on the way to `path` that others cannot enter, if any."""
    current = "/"
    for part in os.path.realpath(path).split(os.sep)[1:]:
        current = os.path.join(current, part)
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return current
    return None
