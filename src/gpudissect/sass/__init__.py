"""sass."""
