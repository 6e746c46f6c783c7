"""A sweep split into shards: the stable partition (``partition``), ``--bench-shard`` from a
scheduler's environment (``env``), what each shard file holds and how it ended (``parts``), and
which shards of a sweep a set of files holds (``coverage``). The pytest side is ``plugin.shard``."""
