"""Adversarial regression suite: exploit candidates the judge must defeat, and unusual legitimate
candidates it must accept (docs/architecture.md, "Timing and roofline" and "What a candidate cannot do,
and why"; each exploit names where it was seen: a published reward hack of a peer benchmark or
environment, or "new").

`exploits.py` and `legit.py` hold the candidate programs as data; `test_adversarial.py` runs them
through a CPU environment at world size 2 and asserts the outcomes. Exploits that still get through
are marked `xfail(strict=True)` with the hole named, so the suite documents what is open.
"""
