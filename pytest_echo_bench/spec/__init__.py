"""Specs: loading and validating a benchmark spec file, with file, line and key in every error.
Nothing here imports pytest, or anything of ours but the error tree."""
