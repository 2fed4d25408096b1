"""Reading a ParallelKernelBench checkout the user names (never vendored: PKB's files stay outside pkb-env).

`Checkout(path)` takes a git directory (a bare clone, or `fetch`'s mirror) or a working tree with its history, and
reads files at any commit with git itself: PKB's published corpus was deleted from its history (commits d4b4565,
7d5da89, 842ab32, 2fa1fb6, e2b5d66) and lives on at each deleting commit's parent (`CORPUS`). It also takes a plain
folder holding those folders as `extract` wrote them (a machine without git history or network, such as a GPU host
the repository's working tree is copied to): there the files are read as they are, each folder already at its
revision.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Folder:
    """One of PKB's published solution folders: where it lives in PKB's history, and whose it is."""

    deleted_in: str     # the commit that deleted it (read at its parent)
    name: str
    model: str
    backend: str


CORPUS = (
    Folder("d4b4565", "solutions_cuda_bf16_h100_8_openai_gpt-5.5", "GPT-5.5", "cuda"),
    Folder("7d5da89", "solutions_cuda_bf16_h100_8_anthropic_claude-opus-4-7", "Claude Opus 4.7", "cuda"),
    Folder("842ab32", "solutions_cuda_bf16_h100_8_google_gemini-3-pro-preview", "Gemini 3 Pro", "cuda"),
    Folder("2fa1fb6", "solutions_triton_bf16_h100_8_google_gemini-3-pro-preview", "Gemini 3 Pro", "triton"),
    Folder("e2b5d66", "solutions_parallelkittens_bf16_h100_8_google_gemini-3-pro-preview", "Gemini 3 Pro",
           "parallelkittens"),
)
# PKB's published zero-shot counts (correct / faster than PyTorch + NCCL, pass@1 and fast_1@1 over the 87
# problems; its project page): the table's yardstick.
PUBLISHED = {"GPT-5.5": (28, 22), "Claude Opus 4.7": (20, 12), "Gemini 3 Pro": (24, 12)}


class CheckoutError(ValueError):
    """The path is no git checkout, or lacks a commit or file asked for; the message says which."""


class Checkout:
    def __init__(self, path: str | Path):
        path = Path(path).expanduser()
        if (path / ".git").exists():
            self.git = ["git", "-C", str(path)]
        elif (path / "HEAD").is_file() and (path / "objects").is_dir():
            self.git = ["git", "--git-dir", str(path)]
        elif path.is_dir() and (any(path.glob("solutions_*")) or (path / "reference").is_dir()):
            self.git = None   # extracted: the folders as they are
        else:
            raise CheckoutError(f"{path} is neither a git checkout, a git directory nor a folder of PKB's folders: "
                                f"clone ParallelKernelBench (git clone https://github.com/togethercomputer/"
                                f"ParallelKernelBench) and pass its path, or a folder extracted from one "
                                f"(python benchmarks/pkb_corpus.py CLONE --extract DIR)")
        self.path = path

    def _run(self, *args: str) -> str:
        proc = subprocess.run([*self.git, *args], capture_output=True, text=True)
        if proc.returncode != 0:
            raise CheckoutError(f"git {' '.join(args)} in {self.path}: {proc.stderr.strip() or 'failed'} (a clone "
                                f"with PKB's full history is needed: not --depth 1)")
        return proc.stdout

    def files(self, rev: str, folder: str) -> list[str]:
        """The paths (from the repository's root) of the Python files in `folder` at `rev` (an extracted folder:
        as it is, whatever `rev`)."""
        if self.git is None:
            if not (self.path / folder).is_dir():
                raise CheckoutError(f"{self.path} has no folder {folder}: extract it from a clone with its history "
                                    f"(python benchmarks/pkb_corpus.py CLONE --extract {self.path})")
            return sorted(f"{folder}/{p.name}" for p in (self.path / folder).glob("*.py"))
        return [f"{folder}/{line}" for line in self._run("ls-tree", "--name-only", f"{rev}:{folder}").splitlines()
                if line.endswith(".py")]

    def read(self, rev: str, path: str) -> str:
        if self.git is None:
            return (self.path / path).read_text()
        return self._run("show", f"{rev}:{path}")

    def extract(self, folders, to: str | Path) -> dict[str, int]:
        """Write each of `folders` (Folder, CORPUS's) as it was at its deleting commit's parent into `to`/<name>/,
        its Python files only; files written per folder. A folder already there is replaced whole."""
        written = {}
        for folder in folders:
            target = Path(to) / folder.name
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            rev = f"{folder.deleted_in}^"
            paths = self.files(rev, folder.name)
            for path in paths:
                (target / Path(path).name).write_text(self.read(rev, path))
            written[folder.name] = len(paths)
        return written
