"""Specs: loading and validating a benchmark spec file, checking its arms, and its fingerprint.
Nothing here imports pytest."""
