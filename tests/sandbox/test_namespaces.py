"""A cell's namespaces and allowlisted root, built directly in a forked child: as root, and as an unprivileged
user through a user namespace (the path most users' machines take; the executor tests here run as root).

The child plays the cell (cell.contain: namespaces, the allowlisted root, PID 1, pivot_root) and forks a
"rank" that drops its privileges and reports what it can see and do; the parent asserts. Skipped where
namespaces are unavailable (the executor then reports them unavailable and falls back; test_isolation.py
covers that).
"""
import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import traceback

import pytest

from pkb_env.sandbox import cell, namespaces, rootfs
from pkb_env.sandbox.privileges import NOBODY, drop_privileges

MISSING = namespaces.probe()
pytestmark = pytest.mark.skipif(MISSING is not None or os.geteuid() != 0,
                                reason=f"needs root to play both parts here, and namespaces ({MISSING})")


def _as_rank(uid: int | None, paths: dict) -> dict:
    """What a rank of the cell sees (run in a grandchild that dropped its privileges like a rank)."""
    drop_privileges(uid)
    seen = {"uid": os.getuid(), "root": sorted(os.listdir("/")), "pids": sorted(p for p in os.listdir("/proc")
                                                                                if p.isdigit())}
    with open("/proc/self/status") as f:
        seen["capabilities"] = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff"))
    for name, path in paths["read"].items():
        try:
            with open(path) as f:
                seen[name] = "READ " + f.read()
        except OSError as exc:
            seen[name] = f"errno {exc.errno}"
    for name, path in paths["write"].items():
        try:
            with open(path, "w") as f:
                f.write("x")
            seen[name] = "WROTE"
        except OSError as exc:
            seen[name] = f"errno {exc.errno}"
    return seen


def _in_child(as_user: bool, workdir: str, plan: rootfs.Plan, paths: dict) -> dict:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        report = {}
        try:
            os.close(read_end)
            if as_user:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                # A process that changed uid is not dumpable, so its /proc/self files stay root's; a user who
                # was never root (the case this stands for) is dumpable and may write its own uid_map.
                ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
            cell.PLAN = plan
            ours, theirs = socket.socketpair()
            isolation, init = cell.contain({"namespaces": True, "kind": "ranks", "workdir": workdir,
                                            "owner": (os.geteuid(), os.getegid())}, ours)
            report["isolation"] = isolation
            if init is None:   # no namespaces: the rank would run on the host's root, so it is not run at all
                raise RuntimeError(f"the cell could not be contained here: {isolation}")
            inner_read, inner_write = os.pipe()
            rank = os.fork()
            if rank == 0:
                seen = _as_rank(None if as_user else NOBODY, paths)
                os.write(inner_write, json.dumps(seen).encode())
                os._exit(0)
            os.close(inner_write)
            data = _read_all(inner_read)
            report["rank"] = json.loads(data) if data else {"error": "the rank died"}
            os.kill(init, 9)
        except BaseException:
            report["error"] = traceback.format_exc()
        os.write(write_end, json.dumps(report).encode())
        os._exit(0)
    os.close(write_end)
    data = _read_all(read_end)
    os.waitpid(pid, 0)
    return json.loads(data)


def _in_fresh_interpreter(as_user: bool, workdir: str, plan: rootfs.Plan, paths: dict) -> dict:
    """`_in_child`, forked from a fresh interpreter rather than from this pytest worker: a worker that has run Ray
    or gRPC carries their fork handlers, a fork of it can start with threads, and unshare(CLONE_NEWUSER) refuses a
    threaded caller (EINVAL: seen in 2 of 5 whole-suite runs, never alone). The judge's cells are forked from its
    zygote, itself a fresh interpreter (pkb_env/sandbox/zygote.py)."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = json.dumps({"as_user": as_user, "workdir": workdir, "plan": [list(plan.paths), [list(r) for r in plan.refused],
                                                                        list(plan.hidden)], "paths": paths})
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from sandbox.test_namespaces import _in_child; "
            "from pkb_env.sandbox.rootfs import Plan; a = json.loads(sys.argv[2]); paths, refused, hidden = a['plan']; "
            "plan = Plan(tuple(paths), tuple(tuple(r) for r in refused), tuple(hidden)); "
            "print(json.dumps(_in_child(a['as_user'], a['workdir'], plan, a['paths'])))")
    done = subprocess.run([sys.executable, "-c", code, tests, args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    os.close(fd)
    return data


@pytest.fixture
def layout(tmp_path):
    """A rank set directory, code in a checkout under /tmp (bound back), and secrets the root must hide."""
    root = tempfile.mkdtemp(prefix="pkb-ns-test-")
    workdir = os.path.join(root, "gen")
    os.mkdir(workdir, 0o700)
    os.chmod(root, 0o711)
    checkout = tempfile.mkdtemp(prefix="pkb-ns-checkout-")  # code under /tmp, as a CI checkout may be
    os.chmod(checkout, 0o755)
    with open(os.path.join(checkout, "module.py"), "w") as f:
        f.write("X = 1\n")
    os.chmod(os.path.join(checkout, "module.py"), 0o644)
    private = tempfile.mkdtemp(prefix=".pkb-ns-secret-", dir=os.path.expanduser("~"))  # 0700, in root's home
    public = tempfile.mkdtemp(prefix="pkb-ns-public-", dir="/srv" if os.path.isdir("/srv") else "/var")
    os.chmod(public, 0o755)
    for folder, mode in ((private, 0o600), (public, 0o644)):
        with open(os.path.join(folder, "secret"), "w") as f:
            f.write("hunter2-secret")
        os.chmod(os.path.join(folder, "secret"), mode)
    yield {"root": root, "workdir": workdir, "checkout": checkout, "private": private, "public": public}
    for path in (root, checkout, private, public):
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("as_user", [False, True], ids=["root", "user-namespace"])
def test_a_cell_shows_only_its_allowlist(as_user, layout):
    assert not os.path.exists("/tmp/pkb-ns-probe"), "a stale probe from an earlier run: remove /tmp/pkb-ns-probe"
    os.chown(layout["workdir"], NOBODY, NOBODY)  # the ranks' (nobody's) directory, as the executor makes it
    base = rootfs.plan()
    plan = rootfs.Plan(paths=(*base.paths, layout["checkout"]), refused=())
    package = os.path.dirname(rootfs.__file__)
    paths = {"read": {"checkout": os.path.join(layout["checkout"], "module.py"), "shadow": "/etc/shadow",
                      "private": os.path.join(layout["private"], "secret"),
                      "public": os.path.join(layout["public"], "secret"), "passwd": "/etc/passwd"},
             "write": {"workdir": os.path.join(layout["workdir"], "mine"), "package": os.path.join(package, "x.py"),
                       "checkout_write": os.path.join(layout["checkout"], "module.py"), "etc": "/etc/pkb-probe",
                       "root_dir": "/pkb-probe", "tmp": "/tmp/pkb-ns-probe"}}
    report = _in_fresh_interpreter(as_user, layout["workdir"], plan, paths)
    assert "error" not in report, report.get("error")
    assert report["isolation"]["filesystem"].startswith("allowlisted root"), report["isolation"]
    assert "could not make read-only" not in report["isolation"]["filesystem"], report["isolation"]
    seen = report["rank"]
    assert "error" not in seen, seen
    assert seen["uid"] == NOBODY, seen  # a root judge's ranks drop to nobody; the user-namespace judge is nobody
    assert seen["capabilities"] == 0, "no capability may survive drop_privileges"
    assert seen["pids"] == sorted(seen["pids"]) and len(seen["pids"]) <= 3, \
        f"the rank sees processes beyond its namespace: {seen['pids']}"
    assert "home" not in seen["root"] and "srv" not in seen["root"] and "boot" not in seen["root"], seen["root"]
    for hidden in ("shadow", "private", "public"):
        assert seen[hidden] == "errno 2", f"{hidden}: {seen[hidden]} (the root must not hold it at all)"
    assert seen["checkout"] == "READ X = 1\n", "code bound from under /tmp must stay readable"
    assert seen["passwd"].startswith("READ root:"), "public /etc files are copied in"
    assert seen["workdir"] == "WROTE", seen
    for refused in ("package", "checkout_write", "etc", "root_dir"):
        assert seen[refused] in ("errno 30", "errno 13"), f"{refused}: {seen[refused]}"  # EROFS, or EACCES as nobody
    assert seen["tmp"] == "WROTE", "the private /tmp is writable"
    with open(os.path.join(layout["workdir"], "mine")) as f:
        assert f.read() == "x", "the bound directory is the judge's, not a copy"
    # The cell's own write to its /tmp, looked for by name: other processes (a parallel test worker, a
    # compiler's temporaries) come and go in the host's /tmp meanwhile.
    assert not os.path.exists("/tmp/pkb-ns-probe"), "the cell's /tmp write leaked into the host's /tmp"
    with open(os.path.join(layout["checkout"], "module.py")) as f:
        assert f.read() == "X = 1\n"


def test_the_plan_never_binds_the_working_directory_a_home_or_the_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.chdir("/")
    monkeypatch.setattr(sys, "path", ["", "/", "/tmp", os.path.expanduser("~"), str(cache / "x"), *sys.path])
    plan = rootfs.plan(cache=str(cache))
    assert {"", "/", "/tmp", os.path.expanduser("~"), str(cache / "x")} <= {entry for entry, _ in plan.refused}
    for path in plan.paths:
        assert path not in rootfs.NEVER_WHOLE and path != os.path.expanduser("~"), path
        assert not path.startswith(str(cache)), path
    package = os.path.dirname(os.path.dirname(rootfs.__file__))
    assert any(package == p or package.startswith(p + "/") for p in plan.paths), "pkb_env itself must be bound"


def test_the_plan_shows_no_folder_of_the_checkout_but_the_package_and_the_tasks(monkeypatch):
    """The checkout of an editable install holds tests, docs and solutions beside the package: a sys.path entry
    that holds it or lies in it (PYTHONPATH=., tests/) is refused; only pkb_env/, tasks/ and the venv are bound."""
    import pkb_env
    checkout = os.path.dirname(os.path.dirname(pkb_env.__file__))
    if not os.path.isdir(os.path.join(checkout, "solutions")):
        pytest.skip("pkb_env is not installed editable from a checkout here")
    entries = [checkout, os.path.join(checkout, "tests"), os.path.join(checkout, "solutions", "experts")]
    monkeypatch.setattr(sys, "path", [*entries, *sys.path])
    plan = rootfs.plan()
    refused = dict(plan.refused)
    assert "checkout as a whole" in refused[checkout], refused
    assert "in the project's checkout" in refused[entries[1]], refused
    assert "solutions" in refused[entries[2]], refused
    inside = sorted(p for p in plan.paths if p == checkout or p.startswith(checkout + "/"))
    allowed = [os.path.join(checkout, "pkb_env"), os.path.join(checkout, "tasks")]
    assert all(p in allowed or p.startswith(sys.prefix) for p in inside), inside
    assert set(allowed) <= set(inside), inside
