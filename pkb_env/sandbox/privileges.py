"""Privileges of candidate processes: no root, no capabilities, no way to regain either.

* When the judge runs as root, candidate ranks and builds switch to an unprivileged uid/gid (nobody)
  after setting up, so they cannot signal the judge, read its memory or environment through /proc, or
  read or write its files and caches. That needs the Python installation to be readable by that uid. In
  an allowlisted root (rootfs.py) the directories above the install are 0755 skeletons, so a pyenv under
  a 0700 /root works; without namespaces the host's modes count, and a Python under /root keeps the
  ranks root, without capabilities (which still lets them read files root owns: say so, never hide it).
* A judge that is not root has no other uid to give: in a user namespace it can map only its own.
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

from pkb_env.sandbox.limits import prctl

NOBODY = 65534
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
CAPABILITY_VERSION_3 = 0x20080522


def unprivileged_uid(allowlisted_root: bool, drop: bool = True) -> tuple[int | None, str]:
    """The uid candidates should run as, or None, with what protects the judge's files, in words.

    allowlisted_root: cells show only an allowlisted root (rootfs.py), where the directories above the
    bound install paths are skeletons of mode 0755, so only the install paths' own modes matter. `drop`
    False (JudgeConfig.drop_privileges, PKB_ENV_DROP_PRIVILEGES=0): no uid change, for diagnosing a machine.
    """
    if not drop:
        return None, "off (PKB_ENV_DROP_PRIVILEGES=0)"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        if allowlisted_root:
            return None, ("the judge's own uid in a user namespace (an unprivileged user may map only its own id; "
                          "another needs newuidmap and /etc/subuid), without capabilities: the allowlisted root is "
                          "what keeps the judge's files out of reach")
        return None, ("the judge's own uid, without capabilities and without namespaces: candidates can read and "
                      "write whatever the judge's user can")
    from pkb_env.sandbox.rootfs import SYSTEM, python_paths

    paths = [os.path.realpath(p) for p in python_paths()]
    tops = sorted({*paths, *SYSTEM}, key=len) if allowlisted_root else ["/"]
    for path in paths:
        top = next(t for t in [*tops, "/"] if t == "/" or path == t or path.startswith(t + "/"))
        blocked = _first_closed_directory(path, top)
        if blocked:
            exposed = "" if allowlisted_root else "; candidates can read every file root owns"
            return None, (f"root without capabilities (no uid change: {blocked} is not readable by other users and "
                          f"Python lives under it{exposed})")
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


def _first_closed_directory(path: str, top: str = "/") -> str | None:
    """The first directory from `top` down to `path` (inside it) that others cannot enter, if any."""
    current = os.path.dirname(top) if top != "/" else "/"
    for part in os.path.relpath(path, current).split(os.sep):
        current = os.path.join(current, part)
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return current
    return None
