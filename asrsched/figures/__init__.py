"""Figures and widgets: one house style, per-study figure modules, every interactive explorer."""
