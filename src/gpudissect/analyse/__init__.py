"""analyse."""
