"""What a sweep may cost and what it spent: the estimate before a run (``estimate``), each call's
worst case (``worst``), the hold of that worst case against the run's spend ledger (``hold``,
``ledger``, ``holders``), what the rows spent (``spend``) and dollars in fixed point (``money``).
The pytest side (the limits and the budget's stop) is ``plugin.budget``."""
