"""The progress page: its state, fed incrementally from a results file (``state``, ``meta``), and
the self-contained HTML drawn from it (``html``)."""
