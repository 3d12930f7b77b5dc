"""Whisper inference: weights, CT2 -> Hugging Face conversion, audio I/O, VAD, the synthetic speech corpus, backends."""
