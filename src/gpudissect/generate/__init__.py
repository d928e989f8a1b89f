"""PTX generation."""
