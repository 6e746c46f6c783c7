"""Results files as a sweep: their rows read into items (``read``), merged (``merge``), regraded
(``regrade``), conflicts between files (``conflicts``), and how a sweep ended as its files record it
(``ending``)."""
