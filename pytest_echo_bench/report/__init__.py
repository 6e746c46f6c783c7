"""The report: per-arm figures (``figures``), drawn in every format (``formats``: text and markdown,
JSON, CSV, HTML with its SVG plots), the decide figures as every output shows them (``decision``),
and the live progress page (``page``)."""
