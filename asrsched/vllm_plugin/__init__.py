"""vLLM integration: the duration-aware scheduler plug-in, an in-process backend, the GPU benchmark driver."""
