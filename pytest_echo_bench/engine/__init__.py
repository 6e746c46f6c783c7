"""Running one item: outcome types, the runner, the pool that keeps calls in flight, the run-wide
stop and the retrying call. Nothing here imports pytest."""
