"""The ``echo-bench`` command and what it runs: reports and their statistics, the progress page,
merge, regrade and the unattended supervisor. Reads results files; never runs pytest items."""
