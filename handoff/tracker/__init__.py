"""tracker — see DESIGN.md."""
