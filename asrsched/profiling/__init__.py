"""Profiling real Whisper: measure clips, fit kappa and the service-time model, run and refit whole profiles."""
