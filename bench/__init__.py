"""Benchmarks (``python -m bench``): figures, never assertions in the test suite."""
