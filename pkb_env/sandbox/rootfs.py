"""The allowlisted root of a cell: all of the host that a rank set's ranks or a build can see.

A cell (cell.py) builds it once, in its new mount namespace, before its first process starts:

* a fresh tmpfs becomes "/" and only what is listed here is put in it:
  - read-only binds: the Python install and the install directories on `sys.path`, the `pkb_env` package
    and the mapped folders a rank imports (layout.py `IN_CELLS`: the tasks), system libraries and binaries (/usr/lib, /usr/bin, /lib64, ...),
    the C/C++ and CUDA toolchains (Triton builds a C launcher with gcc inside ranks; builds need nvcc,
    g++ and ninja), CUDA and the GPU driver's libraries, and /sys (NCCL and the driver read the PCI
    topology there);
  - copies of a few public files of /etc (the loader's cache, passwd, group, hosts, alternatives/, ...):
    never shadow, gshadow, sudoers or ssh;
  - /dev with null, zero, full, random, urandom, tty and the NVIDIA nodes only;
  - writable: private size-capped tmpfs /tmp, /var/tmp and /dev/shm, the rank set's own directory,
    and the fresh /proc the cell's PID 1 mounts;
* then the cell pivots into it and detaches the old root, so nothing else of the host is reachable,
  not even through "..": not /root or /home, not the judge's caches (~/.cache/pkb_env), ~/.netrc,
  ~/.config, or /etc/shadow. A read-only mount is still readable; an absent one is not.

Symlinks on the way to a listed path are reproduced (/usr/local/cuda -> /etc/alternatives/cuda -> ...),
so paths mean inside what they mean outside.

No answer key is in reach (docs/containment.md): the other mapped folders (solutions, policies and recipes,
rewards, configs) are never bound, and where an install directory holds them (a wheel puts them inside
site-packages/pkb_env) an empty read-only tmpfs covers each (`Plan.hidden`). In a checkout installed editable, only
the package folders a rank imports and the Python install are bound: a `sys.path` entry that holds the checkout
or lies in it elsewhere (PYTHONPATH=., tests/, benchmarks/) is refused, so its tests, docs, benchmarks and
solutions stay out. A Python that lives under a home (a pyenv in /root/.pyenv,
a venv in a checkout) is bound alone, inside skeleton parents of mode 0755: that is also what lets
ranks run as nobody where /root is 0700. Entries of `sys.path` that are not install directories as
such (the working directory, "/", /tmp, a home) are never bound.

`plan()` decides what goes in (once per process that forks cells: the zygote); `build()` and `enter()`
run in each cell.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field

from pkb_env.config import default_cache_dir
from pkb_env.sandbox import namespaces as ns
from pkb_env.layout import IN_CELLS, MAPPED

SYSTEM = ("/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/include",
          "/usr/local/lib", "/usr/local/include", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
SYSTEM_PREFIXES = ("/", "/usr", "/usr/local")
TOOLS = ("cc", "c++", "gcc", "g++", "ld", "as", "ar", "nvcc", "ninja")  # the toolchain builds run
CUDA = "/usr/local/cuda"
DRIVER = "/usr/local/nvidia"
DRIVER_LIBRARIES = ("libcuda.so", "libnvidia-")  # ldconfig entries whose directories GPU ranks need
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "hosts", "host.conf",
       "localtime", "alternatives", "os-release", "nccl.conf")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
GPU_DEVICES = "nvidia*"  # nvidia0..N, nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, nvidia-caps/
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}
# Never bound as a whole, whatever sys.path says (their parts may be: /usr/lib, /opt/torch/.venv, ...).
NEVER_WHOLE = ("/", "/tmp", "/var/tmp", "/dev", "/dev/shm", "/proc", "/sys", "/etc", "/home", "/root", "/run",
               "/var", "/mnt", "/media", "/srv", "/opt", "/usr", "/usr/local", "/boot")
# Places in a home that hold credentials: never bound, even where an install lists them.
PRIVATE_IN_HOME = (".ssh", ".gnupg", ".netrc", ".aws", ".azure", ".kube", ".docker", ".config", ".git-credentials",
                   ".pypirc", ".npmrc", ".cache/huggingface")
FIRST_HUMAN_UID, NOBODY_UID = 1000, 65534  # login.defs' UID_MIN on Debian, Ubuntu and Fedora; nobody
STAGE, OLD, NEW = "/tmp", "/old", "/new"  # staging mount point; the old and the new root inside the staging root
ROOT_BYTES = 16 << 20   # the new root's own tmpfs: skeleton directories, /etc copies, empty mount points
MAX_LINKS = 40          # symlinks followed on the way to one path (the kernel's own limit)


@dataclass(frozen=True)
class Plan:
    """What a cell's root shows of the host, decided once per process that forks cells."""

    paths: tuple[str, ...]                  # host paths bound read-only (outermost first)
    refused: tuple[tuple[str, str], ...]    # (sys.path entry, why it is not bound)
    hidden: tuple[str, ...] = ()            # host paths inside bound ones, covered by an empty read-only tmpfs


def plan(environ: dict[str, str] | None = None, home: str | None = None, cache: str | None = None) -> Plan:
    """The host paths ranks and builds need.

    environ: gives PATH, LD_LIBRARY_PATH and CUDA_HOME (default: ours); home and cache: the judge's home
    and cache directories (default: ours), never bound (the zygote, which plans, knows neither by itself).
    """
    environ = os.environ if environ is None else environ
    walls = Walls(_homes(home or os.path.expanduser("~")), os.path.normpath(cache or default_cache_dir()),
                  *_checkout())
    wanted: list[str] = [*SYSTEM, *python_paths(), *walls.shown, *_toolchain_paths(environ), *_cuda_paths(environ)]
    refused: list[tuple[str, str]] = []
    for entry in sys.path:
        why = walls.refusal(entry)
        if why:
            refused.append((entry, why))
        elif os.path.exists(entry):
            wanted.append(entry)
    kept = set()
    for path in map(os.path.normpath, wanted):
        if os.path.lexists(path) and not walls.refusal(path) and not walls.refusal(os.path.realpath(path)):
            kept.add(path)
    paths: list[str] = []
    for path in sorted(kept, key=lambda p: (p.count("/"), p)):  # outermost first
        if not (ns.under(path, paths) and ns.under(os.path.realpath(path), paths)):
            paths.append(path)  # not already shown, with every symlink on its way, by an outer path
    hidden = sorted(p for p in walls.hidden if ns.under(p, paths) or ns.under(os.path.realpath(p), paths))
    return Plan(tuple(paths), tuple(refused), tuple(hidden))


def python_paths() -> list[str]:
    """The interpreter and its install trees (system prefixes themselves excluded: SYSTEM covers them)."""
    paths = [sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    names = sysconfig.get_paths()
    paths += [names[k] for k in ("stdlib", "platstdlib", "purelib", "platlib", "include", "platinclude") if k in names]
    return [p for p in paths if p and os.path.normpath(p) not in SYSTEM_PREFIXES]


@dataclass(frozen=True)
class Walls:
    """What a cell's root never shows: homes, the judge's cache, and the project's own files beyond what a rank
    imports (the checkout of an editable install, where tests, docs, benchmarks and solutions lie beside the
    package; wherever installed, the mapped folders that are not `IN_CELLS`)."""

    homes: set[str]
    cache: str
    checkout: str | None        # the folder of an editable install's checkout; None for an installed package
    shown: tuple[str, ...]      # where the packages of `IN_CELLS` are
    hidden: tuple[str, ...]     # where the other mapped packages are

    def refusal(self, path: str) -> str | None:
        """Why `path` may not be bound into a cell's root, or None."""
        if not path or not os.path.isabs(path):
            return "relative (the working directory)"
        path = os.path.normpath(path)
        if path in NEVER_WHOLE:
            return f"{path} as a whole"
        if any(ns.under(home, [path]) for home in self.homes):
            return "a home directory (or one above homes) as a whole"
        if ns.under(path, [self.cache]) or ns.under(self.cache, [path]):
            return "the judge's cache"
        if ns.under(path, [os.path.join(home, private) for home in self.homes for private in PRIVATE_IN_HOME]):
            return "a home's credentials"
        if ns.under(path, list(self.hidden)):
            return "the package's solutions, policies, rewards or configs (no cell needs them)"
        if self.checkout and ns.under(self.checkout, [path]):
            return "the project's checkout as a whole (its tests, docs, benchmarks and solutions)"
        if self.checkout and ns.under(path, [self.checkout]) and \
                not ns.under(path, [*self.shown, *map(os.path.normpath, python_paths())]):
            return "in the project's checkout, beside its tests, docs and solutions (only the package folders a " \
                   "rank imports are shown)"
        return None


def _homes(own: str) -> set[str]:
    """The home directories of root and of human users (uid 1000 and up), and `own` (the judge's HOME).

    System accounts' "homes" are system directories (Debian's bin and sync: /bin; daemon: /usr/sbin).
    """
    homes = {os.path.normpath(own)}
    try:
        homes |= {os.path.normpath(p.pw_dir) for p in pwd.getpwall()
                  if p.pw_dir and (p.pw_uid == 0 or FIRST_HUMAN_UID <= p.pw_uid < NOBODY_UID)}
    except OSError:
        pass
    return {h for h in homes if h not in ("/", "/nonexistent")}


def _checkout() -> tuple[str | None, tuple[str, ...], tuple[str, ...]]:
    """(the checkout, where the packages cells show are, where the other mapped packages are).

    An editable install keeps the mapped folders beside the package, in the checkout (tasks/ next to pkb_env/);
    an installed package holds them inside itself (site-packages/pkb_env/tasks), with no checkout."""
    def where(name: str) -> list[str]:
        spec = importlib.util.find_spec(name)
        return [os.path.normpath(p) for p in (spec.submodule_search_locations or [])] if spec else []

    package = where("pkb_env")
    shown = [*package, *(p for name in IN_CELLS if name != "pkb_env" for p in where(name))]
    hidden = [p for name in MAPPED if name not in IN_CELLS for p in where(name)]
    parents = {os.path.dirname(p) for p in package}
    checkout = next(iter(parents)) if len(parents) == 1 and any(
        os.path.dirname(p) in parents for p in shown if p not in package) else None
    return checkout, tuple(shown), tuple(hidden)


def _toolchain_paths(environ) -> list[str]:
    """Each tool as found on PATH (symlinks reproduced), and the install prefix it belongs to."""
    found = []
    for tool in TOOLS:
        where = shutil.which(tool, path=environ.get("PATH", os.defpath))
        if where is None:
            continue
        real = os.path.realpath(where)
        folder = os.path.dirname(real)
        prefix = os.path.dirname(folder)
        found += [where, prefix if os.path.basename(folder) == "bin" and prefix not in SYSTEM_PREFIXES else folder]
    return found


def _cuda_paths(environ) -> list[str]:
    """The CUDA toolkit and the GPU driver's libraries (as LD_LIBRARY_PATH and the loader's cache name them)."""
    found = [environ.get("CUDA_HOME", ""), environ.get("CUDA_PATH", ""), CUDA, DRIVER]
    found += [p for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    ldconfig = shutil.which("ldconfig", path="/sbin:/usr/sbin:" + environ.get("PATH", os.defpath))
    if ldconfig:
        try:
            listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            listing = ""
        for line in listing.splitlines():
            name, _, path = line.strip().partition(" => ")
            if path and name.startswith(DRIVER_LIBRARIES):
                found.append(os.path.dirname(path))
    return [p for p in found if p]


# -- building a root (in a cell, after unshare) ---------------------------------------------------------
@dataclass
class Root:
    """What `build` put in the new root; `refused` lists mounts that could not be made read-only."""

    bound: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    etc: list[str] = field(default_factory=list)
    writable: list[str] = field(default_factory=list)   # mount points inside the new root left writable
    hidden: list[str] = field(default_factory=list)     # folders inside bound ones covered by an empty tmpfs
    refused: list[str] = field(default_factory=list)


def build(plan: Plan, scratch: list[tuple[str, int]], workdir: str, workdir_tmpfs: tuple[int, int, int] | None
          ) -> Root:
    """Make the new root at /new under a staging root (the host stays at /old until `enter`).

    scratch: (path, bytes) of private tmpfs mounts (/tmp, /var/tmp, /dev/shm).
    workdir: the rank set's directory: bound read-write from the host, or, with `workdir_tmpfs`
    (bytes, uid, gid), a private tmpfs of that size owned by that uid (a build's, which must leave no file
    on the host).
    """
    old_umask = os.umask(0o022)
    try:
        ns.mount(None, "/", None, ns.MS_REC | ns.MS_PRIVATE)  # nothing done here reaches the host's mount table
        ns.mount("tmpfs", STAGE, "tmpfs", ns.MS_NOSUID | ns.MS_NODEV, "size=1m,mode=0755")
        os.mkdir(STAGE + OLD)
        os.mkdir(STAGE + NEW)
        ns.pivot_root(STAGE, STAGE + OLD)
        os.chdir("/")
        ns.mount("tmpfs", NEW, "tmpfs", ns.MS_NOSUID | ns.MS_NODEV, f"size={ROOT_BYTES},mode=0755")
        root = Root()
        _dev(root)
        for path, size in scratch:
            _tmpfs(root, path, f"size={size},mode=1777")
        if workdir_tmpfs is None:
            _bind(root, workdir, writable=True)
        else:
            size, uid, gid = workdir_tmpfs
            _tmpfs(root, workdir, f"size={size},mode=0700,uid={uid},gid={gid}")
        _etc(root)
        for path in plan.paths:
            _place(root, path)
        for path in plan.hidden:
            _cover(root, path)
        _bind(root, "/sys")
        os.mkdir(NEW + "/proc")
        _read_only(root)
        return root
    finally:
        os.umask(old_umask)


def enter() -> None:
    """Pivot into the new root and detach the old one (after PID 1 mounted /new/proc)."""
    os.chdir(NEW)
    ns.pivot_root(".", ".")   # the staging root is stacked on top of the new one...
    ns.detach(".")            # ...and detached, with the host's tree under it
    os.chdir("/")


def _dev(root: Root) -> None:
    _tmpfs(root, "/dev", "size=64k,mode=0755", writable=False)
    names = [*DEVICES, *sorted(os.path.basename(p) for p in glob.glob(f"{OLD}/dev/{GPU_DEVICES}"))]
    for name in names:
        source = f"{OLD}/dev/{name}"
        if not os.path.exists(source):
            continue
        target = f"{NEW}/dev/{name}"
        if os.path.isdir(source):
            os.mkdir(target)
        else:
            open(target, "w").close()
        ns.mount(source, target, None, ns.MS_BIND | ns.MS_REC)
        root.devices.append(name)
        root.writable.append(target)  # a read-only mount of a device node refuses writes to it
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"{NEW}/dev/{name}")


def _cover(root: Root, path: str) -> None:
    """An empty tmpfs over `path` (a folder inside a bound one), made read-only with the rest: what was there is
    out of reach (ranks hold no capability that could unmount it: privileges.py)."""
    real = _resolve(path)[0]
    if os.path.isdir(NEW + real):
        ns.mount("tmpfs", NEW + real, "tmpfs", ns.MS_NOSUID | ns.MS_NODEV, "size=4k,mode=0555")
        root.hidden.append(real)


def _tmpfs(root: Root, path: str, options: str, writable: bool = True) -> None:
    target = NEW + path
    os.makedirs(target, exist_ok=True)
    ns.mount("tmpfs", target, "tmpfs", ns.MS_NOSUID | ns.MS_NODEV, options)
    if writable:
        root.writable.append(target)


def _etc(root: Root) -> None:
    """Copies of public /etc files (symlinks inside directories kept as symlinks: alternatives/)."""
    os.makedirs(NEW + "/etc", exist_ok=True)
    for name in ETC:
        source = _resolve(f"/etc/{name}")[0]
        target = f"{NEW}/etc/{name}"
        try:
            if os.path.isdir(OLD + source):
                os.mkdir(target)
                for entry in os.scandir(OLD + source):
                    if entry.is_symlink():
                        os.symlink(os.readlink(entry.path), os.path.join(target, entry.name))
                    elif entry.is_file(follow_symlinks=False):
                        shutil.copyfile(entry.path, os.path.join(target, entry.name))
            elif os.path.isfile(OLD + source):
                shutil.copyfile(OLD + source, target)
            else:
                continue
        except OSError:
            continue  # unreadable to the judge's user: ranks do without it
        root.etc.append(name)


def _resolve(path: str) -> tuple[str, list[tuple[str, str]]]:
    """`path` on the host with every symlink on the way followed: (real path, [(link, its target text)])."""
    links = []
    parts = [p for p in os.path.normpath(path).split("/") if p]
    current = "/"
    i = 0
    while i < len(parts):
        current = os.path.join(current, parts[i])
        try:
            mode = os.lstat(OLD + current).st_mode
        except OSError:
            return os.path.normpath(os.path.join(current, *parts[i + 1:])), links
        if stat.S_ISLNK(mode):
            if len(links) >= MAX_LINKS:
                return current, links
            target = os.readlink(OLD + current)
            links.append((current, target))
            base = "/" if target.startswith("/") else os.path.dirname(current)
            parts = [p for p in os.path.normpath(os.path.join(base, target, *parts[i + 1:])).split("/") if p]
            current, i = "/", 0
            continue
        i += 1
    return current, links


def _place(root: Root, path: str) -> None:
    """Make `path` resolve in the new root as on the host: its symlinks reproduced, the real path bound."""
    real, links = _resolve(path)
    for link, target in links:
        if not ns.under(link, root.bound) and not os.path.lexists(NEW + link):
            os.makedirs(os.path.dirname(NEW + link), exist_ok=True)
            os.symlink(target, NEW + link)
    if os.path.exists(OLD + real):
        _bind(root, real)


def _bind(root: Root, path: str, writable: bool = False) -> None:
    if ns.under(path, root.bound):
        return  # already visible through an outer bind
    source, target = OLD + path, NEW + path
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            open(target, "w").close()
    ns.mount(source, target, None, ns.MS_BIND | ns.MS_REC)
    root.bound.append(path)
    if writable:
        root.writable.append(target)


def _read_only(root: Root) -> None:
    """Remount every mount of the new root read-only, nosuid (and nodev) but those left writable."""
    for point, kept in ns.mount_points(proc=OLD + "/proc"):
        if not ns.under(point, [NEW]) or point == NEW or point in root.writable:
            continue
        flags = ns.MS_REMOUNT | ns.MS_BIND | ns.MS_RDONLY | ns.MS_NOSUID | kept
        if not ns.under(point, [NEW + "/dev"]):
            flags |= ns.MS_NODEV
        try:
            ns.mount(None, point, None, flags)
        except OSError:
            root.refused.append(point.removeprefix(NEW))
    ns.mount(None, NEW, None, ns.MS_REMOUNT | ns.MS_BIND | ns.MS_RDONLY | ns.MS_NOSUID | ns.MS_NODEV)
