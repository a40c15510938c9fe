"""wire (see DESIGN.md)."""
