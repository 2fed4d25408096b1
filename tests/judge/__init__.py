"""The stages of a step (pkb_env/judge/): parse, screen, compare, verify, timing, fingerprints, feedback,
roofline, compile checks and the verdict; what needs ranks goes through a JudgeService, nothing under it."""
