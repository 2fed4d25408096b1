"""`vf-eval pkb_env_vf`: pkb-env's verifiers environment (pkb_env/integrations/verifiers.py)."""
from pkb_env.integrations.verifiers import PkbEnv, PkbTaskset

__all__ = ["PkbTaskset", "PkbEnv"]
