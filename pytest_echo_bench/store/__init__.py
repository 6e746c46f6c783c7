"""The results file and what is read from it: records, the writer, the readers (full and fast),
per-arm tallies, the response cache, and the file conventions (``files``). Nothing here imports
pytest."""
