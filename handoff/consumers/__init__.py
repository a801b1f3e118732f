"""consumers — see DESIGN.md."""
