"""Every way in (pkb_env/entrypoints/ and the libraries they use): the Gymnasium env and its vector and
wrappers, TRL, verl, SkyRL, verifiers, the OpenEnv server, the CLI, an async door, evaluate, datasets, wandb,
the Ray pool, optional extras."""
