"""Datasets: the example type, the general loaders and the registry that names every loader.
Nothing here imports pytest."""
