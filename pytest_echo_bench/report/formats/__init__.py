"""The report's formats: ``text`` (text, markdown, JSON, and the dispatch by name), ``csv``,
``html`` and the plots it embeds (``svg``)."""
