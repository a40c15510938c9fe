"""The project's benchmarks; each module is also a script (see hedgerow/commands/bench.py)."""
