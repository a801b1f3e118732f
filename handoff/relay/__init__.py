"""relay — see DESIGN.md."""
