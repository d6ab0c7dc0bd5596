"""Reading the clean log: a topic's live records at a committed version, for every tool downstream."""
