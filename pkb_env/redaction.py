"""The judge user's secrets, kept out of every text that a candidate's processes produced.

What counts as a secret: the values of the judge's secret-bearing environment variables (names that
sandbox/variables.py's SECRET matches: KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL, AUTH; so
WANDB_API_KEY, HF_TOKEN, HUGGING_FACE_HUB_TOKEN, OPENAI_API_KEY, ANTHROPIC_API_KEY; and every AWS_*,
GOOGLE_*, GCP_*, GCLOUD_* and AZURE_* variable), the passwords and accounts in the judge user's ~/.netrc
(or $NETRC; wandb keeps its key there), and a Hugging Face token file ($HF_TOKEN_PATH, $HF_HOME/token,
~/.cache/huggingface/token). A `Redactor` collects them once, in the judge's process, when a Judge (or
a WandbLogger) is made.

Where it applies (docs/containment.md): the compile service's answers to a rank, and the evaluation
record when a step ends (every string in it: errors, log tails, mismatch texts, the code), before the
feedback is written from it; so the feedback, `record.to_dict()` and wandb hold no secret value. The
wandb logger applies it once more to everything it logs.

How: a value of 8 characters or more is replaced wherever it occurs; one of 4 to 7 characters only where
it stands alone (not inside a longer word or number), so that a short value does not blank ordinary
text; shorter values are not redacted (they cannot be told apart from ordinary text). Only verbatim
copies are caught, not a secret a candidate encoded: the wall is that no rank can read one (the scrubbed
environment, the allowlisted root); this is the net under it.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pkb_env.sandbox.variables import SECRET

REDACTED = "[redacted]"
CLOUD = re.compile(r"^(AWS|GOOGLE|GCP|GCLOUD|AZURE)_")
MIN_ALONE, MIN_ANYWHERE = 4, 8  # characters: redacted where standing alone / wherever found
NETRC_SECRETS = ("password", "account")


class Redactor:
    def __init__(self, secrets: Iterable[str]):
        values = sorted({s for s in secrets if isinstance(s, str) and len(s) >= MIN_ALONE}, key=len, reverse=True)
        self._anywhere = [v for v in values if len(v) >= MIN_ANYWHERE]
        alone = [re.escape(v) for v in values if len(v) < MIN_ANYWHERE]
        self._alone = re.compile(rf"(?<![A-Za-z0-9])(?:{'|'.join(alone)})(?![A-Za-z0-9])") if alone else None

    @classmethod
    def of_judge(cls, environ: Mapping[str, str] | None = None, home: str | None = None) -> "Redactor":
        """The secrets of this process's environment and of its user's home (see the module's docstring)."""
        environ = os.environ if environ is None else environ
        home = home or os.path.expanduser("~")
        secrets = [v for k, v in environ.items() if SECRET.search(k) or CLOUD.match(k)]
        secrets += _netrc_secrets(environ.get("NETRC") or os.path.join(home, ".netrc"))
        hf_home = environ.get("HF_HOME")
        for token_file in (environ.get("HF_TOKEN_PATH"), hf_home and os.path.join(hf_home, "token"),
                           os.path.join(home, ".cache", "huggingface", "token")):
            secrets += _file_secret(token_file)
        return cls(secrets)

    def __bool__(self) -> bool:
        return bool(self._anywhere or self._alone)

    def redact(self, value: Any) -> Any:
        """`value` with every secret in its strings replaced by "[redacted]".

        Strings, mappings, lists and tuples come back as new objects; dataclass instances (an
        EvaluationRecord and its parts) are redacted in place and returned.
        """
        if not self:
            return value
        if type(value) is str:
            for secret in self._anywhere:
                value = value.replace(secret, REDACTED)
            return self._alone.sub(REDACTED, value) if self._alone else value
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                setattr(value, f.name, self.redact(getattr(value, f.name)))
            return value
        if isinstance(value, Mapping):
            return {self.redact(k): self.redact(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.redact(v) for v in value)
        return value


def _netrc_secrets(path: str) -> list[str]:
    """The tokens after `password` and `account` in a .netrc (read as tokens: a malformed file still counts)."""
    try:
        with open(path) as f:
            tokens = f.read().split()
    except (OSError, UnicodeDecodeError):
        return []
    return [tokens[i + 1] for i, token in enumerate(tokens[:-1]) if token in NETRC_SECRETS]


def _file_secret(path: str | None) -> list[str]:
    if not path:
        return []
    try:
        with open(path) as f:
            text = f.read(4096).strip()
    except (OSError, UnicodeDecodeError):
        return []
    return [text] if text else []
