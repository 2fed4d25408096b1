"""Privileges of candidate processes: no root, no capabilities, no way to regain either.

* When the judge runs as root, candidate ranks switch to an unprivileged uid/gid (nobody) after setting
  up, so they cannot signal the judge, read its memory or environment through /proc, or write its
  files and caches. That needs the Python installation to be readable by that uid; where it is not
  (e.g. a venv whose interpreter lives under a 0700 /root) they stay root but lose every capability.
* Either way no rank can gain privileges again (PR_SET_NO_NEW_PRIVS: setuid binaries do nothing).
Namespaces (own PIDs, read-only filesystem, no network) are the cell's business: namespaces.py.
What was applied is reported in the executor's `isolation` description.
"""
from __future__ import annotations

import ctypes
import os
import resource
import stat
import sys
import sysconfig

from pkb_env.executors.limits import prctl

NOBODY = 65534
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
CAPABILITY_VERSION_3 = 0x20080522


def unprivileged_uid() -> tuple[int | None, str]:
    """The uid candidates should run as, or None with the reason."""
    if os.environ.get("PKB_ENV_DROP_PRIVILEGES", "1") == "0":
        return None, "off (PKB_ENV_DROP_PRIVILEGES=0)"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None, "the judge's own uid (not root), no capabilities"
    for path in _python_paths():
        blocked = _first_closed_directory(path)
        if blocked:
            return None, (f"root without capabilities (no uid change: {blocked} is not readable by other users "
                          f"and Python lives under it)")
    return NOBODY, f"candidates run as uid {NOBODY} (nobody)"


def drop_privileges(uid: int | None, max_processes: int = 1024) -> None:
    """Become `uid` for good (None: keep the uid, lose every capability); never regain privileges.

    With a uid change, limit how many processes/threads that uid may have (fork bombs).
    """
    if uid is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # a uid other than 0 keeps no capabilities
    elif sys.platform.startswith("linux"):
        drop_capabilities()
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def drop_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable capability sets of this process."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # EINVAL: past the last capability this kernel knows; EPERM: we never held CAP_SETPCAP
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable} words, all zero
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


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
