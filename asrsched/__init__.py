"""asrsched: duration-aware scheduling for ASR serving."""

__version__ = "0.2.0"
