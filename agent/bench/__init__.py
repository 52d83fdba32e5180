"""The benchmark harnesses behind `sbx bench`: the gate, the service, restore.

They drive the application core, the service and the sandbox the way users
do and measure them as ratios within one run; `agent/cli/bench.py` only
parses options and prints. Like `doctor`, `gc` and `selftest`, they are about
the sandbox itself, so they may reach its machinery.
"""
