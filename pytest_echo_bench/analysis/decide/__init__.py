"""Stopping a sweep once its comparisons are decided: the plan and the monitor that pairs rows
(``monitor``), and that monitor fed from a results file in file order (``feed``)."""
