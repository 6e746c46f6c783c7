"""Running one item: what must hold before a call (``check``), the identity of what runs
(``fingerprint``), the retrying call, the runner, the pool that keeps calls in flight, the
run-wide stop and the outcome types. Nothing here imports pytest."""
