"""What containment a cell must give its processes, and the error when it cannot (docs/containment.md).

`Containment` is data the judge hands every cell it asks for (cell.py): enter namespaces where the
machine allows them, and whether to refuse to run at all without them. Its defaults come from the
environment (PKB_ENV_NAMESPACES, PKB_ENV_REQUIRE_CONTAINMENT) through `JudgeConfig`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pkb_env.errors import JudgeError

if TYPE_CHECKING:
    from pkb_env.config import JudgeConfig

NAMESPACES_OFF = "off (PKB_ENV_NAMESPACES=0)"


@dataclass(frozen=True)
class Containment:
    """What each rank set's cell must do: enter namespaces (where possible), and fail if it cannot."""

    namespaces: bool = True
    required: bool = False

    @classmethod
    def of(cls, config: "JudgeConfig") -> "Containment":
        """What `config` asks for (JudgeConfig.namespaces, JudgeConfig.require_containment)."""
        return cls(namespaces=config.namespaces, required=config.require_containment)

    def missing(self) -> str | None:
        """None where a cell started now would get its namespaces, else why not (without starting one)."""
        from pkb_env.sandbox.namespaces import probe

        return probe() if self.namespaces else NAMESPACES_OFF


class ContainmentError(JudgeError):
    """A cell could not set up the containment asked of it; the message names the step and the fix."""


def containment_advice(message: dict, containment: Containment) -> str:
    """The fix for a cell's failure, by its cause: no advice that cannot apply (a root judge is root already)."""
    if message.get("cause") == "required":
        if not containment.namespaces:
            return ("PKB_ENV_NAMESPACES=0 turns namespaces off while PKB_ENV_REQUIRE_CONTAINMENT=1 requires them: "
                    "unset one of the two")
        fix = ("allow unprivileged user namespaces (e.g. sysctl user.max_user_namespaces=15000, or on Ubuntu "
               "kernel.apparmor_restrict_unprivileged_userns=0) or run the judge as root"
               if not message.get("root") else "run the judge where it may create namespaces (a container "
               "started with CAP_SYS_ADMIN, e.g. docker --privileged, or outside one)")
        return f"{fix}; or, accepting weaker isolation, unset PKB_ENV_REQUIRE_CONTAINMENT"
    return ("this machine refused a step of building the cell (a pkb-env bug or an unusual mount setup: please "
            "report it with the message); to run anyway with the weaker fallback, set PKB_ENV_NAMESPACES=0")
