"""Compilation targets: each writes a recipe from a Layout and reads a Layout back (they round-trip)."""
