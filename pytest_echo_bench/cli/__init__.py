"""The ``echo-bench`` command: its parser and dispatch (``main``), its argument types (``args``),
and one module per subcommand that is more than a call into another room. Never imports pytest."""
