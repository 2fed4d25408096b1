"""Candidates cannot read the judge user's private files (issue 11), nor another user's, nor the judge's caches.

The judge's HOME here is a fresh directory inside the real home (as root: under /root, mode 0700) holding
what a training machine's home holds: a 0600 ~/.netrc with a wandb password, ~/.cache/huggingface/token,
~/.config/wandb/settings, and the judge's calibration cache (PKB_ENV_CACHE points into it, so the judge
itself writes there). Another user's home gets a world-readable file. A candidate that goes looking
(past the static screen on purpose: paths computed, so this checks the operating system's wall) must find
none of them, and none of their contents may reach the feedback or the record.
Run as root (CI) and as an unprivileged judge (docs/containment.md: the setpriv command).
"""
import os
import pwd
import secrets
import shutil

import pytest

from conftest import FAST, cpu_judge
from pkb_env.config import JudgeConfig
from pkb_env.sandbox.containment import Containment

NAMESPACES = Containment.of(JudgeConfig()).missing()
needs_namespaces = pytest.mark.skipif(NAMESPACES is not None, reason=f"no namespaces here: {NAMESPACES}")


def _other_users_file() -> tuple[str, str | None, bool]:
    """(path, its content, made here) of a world-readable file in another user's home."""
    if os.geteuid() == 0:
        folder = f"/home/pkb-env-test-{secrets.token_hex(4)}"
        os.makedirs(folder, mode=0o755)
        value = "other-user-" + secrets.token_hex(8)
        with open(os.path.join(folder, "notes"), "w") as f:
            f.write(value)
        os.chmod(os.path.join(folder, "notes"), 0o644)
        return os.path.join(folder, "notes"), value, True
    for user in pwd.getpwall():
        path = os.path.join(user.pw_dir, ".bashrc")
        if user.pw_uid != os.getuid() and user.pw_dir.startswith("/home/") and os.access(path, os.R_OK):
            with open(path) as f:
                return path, f.read().strip().splitlines()[0] if f else None, False
    pytest.skip("no other user's home with a readable file here")


@pytest.fixture(scope="module")
def judge_home(tmp_path_factory):
    real_home = os.path.expanduser("~")
    if not os.access(real_home, os.W_OK):
        pytest.skip(f"the judge's home {real_home} is not writable here")
    home = os.path.join(real_home, f".pkb-env-test-home-{secrets.token_hex(4)}")
    values = {name: f"{name}-{secrets.token_hex(10)}" for name in ("netrc", "hf", "wandb", "calibration")}
    files = {"netrc": ".netrc", "hf": ".cache/huggingface/token", "wandb": ".config/wandb/settings",
             "calibration": ".cache/pkb_env/calibration/planted.json"}
    paths = {}
    for name, relative in files.items():
        path = os.path.join(home, relative)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path, "w") as f:
            f.write(f"machine api.wandb.ai login user password {values[name]}\n" if name == "netrc" else values[name])
        os.chmod(path, 0o600)
        paths[name] = path
    os.chmod(home, 0o700)
    other, other_value, made = _other_users_file()
    paths["other_user"], values["other_user"] = other, other_value
    saved = {k: os.environ.get(k) for k in ("HOME", "PKB_ENV_CACHE")}
    os.environ["HOME"] = home
    os.environ["PKB_ENV_CACHE"] = os.path.join(home, ".cache", "pkb_env")
    judge = cpu_judge(2, FAST.replace(cache_dir=os.environ["PKB_ENV_CACHE"]))
    try:
        session = judge.open("all_reduce")
        yield judge, session.reference, paths, values, home
    finally:
        judge.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(home, ignore_errors=True)
        if made:
            shutil.rmtree(os.path.dirname(other), ignore_errors=True)


PROBE = '''import os
found = []
for name, path in {targets!r}:
    path = "/" + path.lstrip("/")  # computed: the screen does not see a literal path
    try:
        with open(path) as f:
            found.append(name + "=READ:" + f.read(200))
    except OSError as exc:
        found.append(name + "=errno" + str(exc.errno))
for name, path in {folders!r}:
    try:
        found.append(name + "=LISTED:" + ",".join(sorted(os.listdir("/" + path.lstrip("/")))))
    except OSError as exc:
        found.append(name + "=errno" + str(exc.errno))
raise RuntimeError("FOUND " + " ; ".join(found))
def solution(tensor):
    return tensor
'''


@needs_namespaces
def test_candidates_find_no_private_file(judge_home):
    judge, reference, paths, values, home = judge_home
    judge.judge("all_reduce", reference)  # the judge calibrated at its first open: its own cache file exists now
    calibrations = os.listdir(os.path.join(home, ".cache", "pkb_env", "calibration"))
    assert len(calibrations) >= 2, f"the judge wrote no calibration of its own: {calibrations}"
    targets = [*paths.items(), ("shadow", "/etc/shadow"), ("gshadow", "/etc/gshadow"),
               ("own_calibration", os.path.join(home, ".cache", "pkb_env", "calibration", sorted(calibrations)[0]))]
    folders = [("home", home), ("homes", "/home"), ("cache", os.path.join(home, ".cache"))]
    record = judge.judge("all_reduce", PROBE.format(targets=targets, folders=[*folders, ("root_home", "/root")]))
    feedback = record.feedback
    assert record.verdict.value == "build_error", feedback  # the probe ran (it was not screened out) and raised
    assert "FOUND" in feedback and "READ:" not in feedback, feedback
    # /root may exist as a skeleton holding the Python install (a pyenv under /root), never the judge's files.
    assert "LISTED:" not in feedback.replace("root_home=LISTED:", "") and os.path.basename(home) not in feedback, \
        feedback
    for name, _ in targets + folders:
        assert f"{name}=errno2" in feedback, f"{name} must not exist in the cell at all: {feedback}"
    text = str(record.to_dict())
    for value in values.values():
        if value:
            assert value not in feedback and value not in text
    assert record.containment["filesystem"].startswith("allowlisted root"), record.containment
