"""The namespaces a cell enters, exercised directly in a forked child: as root, and as an unprivileged user
through a user namespace (the path most users' machines take; the executor tests here run as root).

The child reports what it could do over a pipe; the parent asserts. Skipped where namespaces are
unavailable (the executor then reports them unavailable and falls back; test_isolation covers that).
"""
import ctypes
import json
import os
import shutil
import tempfile
import traceback

import pytest

from pkb_env.executors import namespaces
from pkb_env.executors.cell import needed_paths
from pkb_env.executors.isolation import NOBODY, drop_privileges

MISSING = namespaces.probe()
pytestmark = pytest.mark.skipif(MISSING is not None or os.geteuid() != 0,
                                reason=f"needs root to play both parts here, and namespaces ({MISSING})")


def _in_child(as_user: bool, workdir: str, checkout: str) -> dict:
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
            namespaces.unshare(user=as_user)
            report["refused"] = namespaces.private_filesystem(workdir, [("/tmp", 16 << 20), ("/dev/shm", 16 << 20)],
                                                              [checkout, os.path.join(checkout, "inner"),
                                                               *needed_paths()])
            with open(os.path.join(checkout, "inner", "module.py")) as f:
                report["checkout"] = f.read()
            namespaces.loopback_up()
            report["tmp"] = sorted(os.listdir("/tmp"))
            with open(os.path.join(workdir, "mine"), "w") as f:
                f.write("ok")
            report["workdir_writable"] = True
            for path in ("/etc/pkb-namespace-probe", os.path.join(os.path.dirname(namespaces.__file__), "x.py"),
                         os.path.join(checkout, "inner", "module.py")):
                try:
                    open(path, "w").close()
                    report.setdefault("wrote", []).append(path)
                except OSError as exc:
                    report.setdefault("errors", []).append(exc.errno)
            child = os.fork()  # PID 1 of the new namespace, as in a cell
            if child == 0:
                namespaces.mount_proc()
                if os.getpid() != 1 or sorted(p for p in os.listdir("/proc") if p.isdigit()) != ["1"]:
                    os._exit(3)
                drop_privileges(None)  # what a rank does where it keeps its uid
                with open("/proc/self/status") as f:
                    capabilities = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff"))
                os._exit(4 if capabilities else 0)
            report["pid1_status"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
        except BaseException:
            report["error"] = traceback.format_exc()
        os.write(write_end, json.dumps(report).encode())
        os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.mark.parametrize("as_user", [False, True], ids=["root", "user-namespace"])
def test_a_cell_filesystem_and_pid_namespace(as_user, tmp_path):
    host_tmp = set(os.listdir("/tmp"))
    root = tempfile.mkdtemp(prefix="pkb-ns-test-")
    workdir = os.path.join(root, "gen")
    os.mkdir(workdir, 0o700)
    checkout = tempfile.mkdtemp(prefix="pkb-ns-checkout-")  # code under /tmp, as a CI checkout may be
    os.mkdir(os.path.join(checkout, "inner"))
    with open(os.path.join(checkout, "inner", "module.py"), "w") as f:
        f.write("X = 1\n")
    os.chmod(checkout, 0o755)
    if as_user:
        os.chown(workdir, NOBODY, NOBODY)
        os.chmod(root, 0o711)
    try:
        report = _in_child(as_user, workdir, checkout)
        assert "error" not in report, report.get("error")
        assert report["refused"] == [], report
        kept = {os.path.basename(root), os.path.basename(checkout)}
        kept |= {p.split(os.sep)[2] for p in needed_paths() if p.startswith("/tmp/") and os.path.exists(p)}
        assert set(report["tmp"]) == kept, "the private /tmp holds only the generation's path and the code bound back in"
        assert report["checkout"] == "X = 1\n", "code kept from under /tmp must stay readable"
        assert report["workdir_writable"] and "wrote" not in report, report
        assert set(report["errors"]) <= {30, 13}, report  # EROFS (or EACCES as nobody)
        assert report["pid1_status"] != 3, "PID 1 of the new namespace must see only itself in its /proc"
        assert report["pid1_status"] == 0, "no capability may survive drop_privileges(None)"
        with open(os.path.join(workdir, "mine")) as f:
            assert f.read() == "ok", "the bound directory is the judge's, not a copy"
        assert set(os.listdir("/tmp")) - host_tmp <= {os.path.basename(root), os.path.basename(checkout)}, \
            "nothing leaked into the host's /tmp"
        with open(os.path.join(checkout, "inner", "module.py")) as f:
            assert f.read() == "X = 1\n"
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(checkout, ignore_errors=True)
