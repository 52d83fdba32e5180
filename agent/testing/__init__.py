"""The scripted OpenAI-compatible model that the tests, the demo and the benchmarks share."""
