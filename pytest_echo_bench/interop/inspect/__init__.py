"""Inspect eval logs: read within bounds (``log``, ``bounds``), imported (``importer``), exported
with the prompts they were asked (``exporter``, ``inputs``)."""
