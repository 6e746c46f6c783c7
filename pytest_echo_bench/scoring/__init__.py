"""Scoring: the verdict type, the built-in text scorers and the registry that names them.
Nothing here imports pytest."""
