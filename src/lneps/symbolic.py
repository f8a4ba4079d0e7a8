"""Placeholder: filled in by the chapter that needs it."""
