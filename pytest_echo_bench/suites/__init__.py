"""Benchmark suites with their own loader and scorer: BIG-Bench Hard, HumanEval (with the
sandbox that runs its completions). Nothing here imports pytest."""
