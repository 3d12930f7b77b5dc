"""The application layer: command line, notebook runner, Voila dashboard, figure gallery."""
