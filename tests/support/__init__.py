"""Shared by the unit and e2e tiers (manifest corpora, the rendered chart); imports neither tier."""
