"""The doors: every way into the judge, each a thin user of the one client (pkb_env/client.py) and the one episode
(pkb_env/episode.py), siblings that never import each other (docs/architecture.md, "The doors").

| door | what | for whom |
|---|---|---|
| `gym/` | `ParallelKernelEnv`, `RayVectorEnv`, the `WandbLogger` and `RecordEpisodes` wrappers | RL loops on Gymnasium's API |
| `trl.py` | `make_trl_reward`: a reward function for TRL's GRPOTrainer | TRL |
| `verl.py` | `compute_score`: verl's custom reward function | verl |
| `skyrl.py` | `PkbTextEnv`: a SkyRL-Gym text env | SkyRL |
| `verifiers.py` | `PkbTaskset`, `PkbEnv`: a verifiers environment | verifiers, vf-eval |
| `openenv/` | the OpenEnv server (`pkb-env serve`) and `PkbEnvClient` | anything speaking OpenEnv over HTTP |
| `cli/` | `pkb-env`: tasks, show, eval, evaluate, demo, calibrate, topology, data | a person at a shell, CI jobs |

What several doors share sits below them: the client and the episode, the observation spaces (pkb_env/spaces.py),
the rewards, a user's settings (pkb_env/settings.py), the evaluation of an agent over the suite
(pkb_env/evaluation/), episode datasets (pkb_env/data/) and the Ray pool (pkb_env/pool/).
"""
