"""`vf-eval pkb_env_vf`: pkb-env's verifiers environment (pkb_env/entrypoints/verifiers.py)."""
from pkb_env.entrypoints.verifiers import PkbChat, PkbEnv, PkbTaskset, load_environment

__all__ = ["PkbChat", "PkbEnv", "PkbTaskset", "load_environment"]
