"""kernels (see DESIGN.md)."""
