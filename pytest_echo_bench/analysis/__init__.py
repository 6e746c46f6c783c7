"""The statistics a sweep and the command share: intervals and paired tests, comparisons across
arms, the anytime-valid test, power and the design behind it, epochs, gates, and deciding a sweep
early (``decide``). Pure functions of rows read by ``results``; nothing here reads a file itself."""
