"""The code that runs inside a rank process: the request loop, bursts, clocks and gates, outputs, fingerprints.

Everything here runs beside candidate code, in the candidate's own process: nothing a rank computes is
believed by the judge without a check of its own (docs/threat_model.md). The tripwire binds the
functions the rank's measuring code uses before candidate code loads.
"""
