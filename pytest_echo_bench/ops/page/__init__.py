"""The progress page: its state, fed incrementally from a results file (``state``), and the
self-contained HTML drawn from it (``html``)."""
