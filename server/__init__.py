"""server (see DESIGN.md)."""
