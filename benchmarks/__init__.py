"""Side-by-side benchmarks: ``make bench`` (``python -m benchmarks``)."""
