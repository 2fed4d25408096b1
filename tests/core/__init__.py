"""The core through its public surfaces: JudgeConfig, JudgeService and its trace sink, LocalClient, Episode,
the record (docs/architecture.md, "The service", "The client" and "The episode")."""
