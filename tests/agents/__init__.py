"""The policies of agents/: the model-backed agents (a tiny local transformers model, an OpenAI-compatible
stub server)."""
