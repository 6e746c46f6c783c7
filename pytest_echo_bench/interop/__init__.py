"""Other tools' files in and out. ``inspect``: Inspect eval logs imported as results files and
results files exported as Inspect logs."""
