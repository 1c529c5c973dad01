"""Benchmark: reference.DataLoader side by side with torch (``python -m bench``)."""
