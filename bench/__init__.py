"""Benchmark scripts: each compares our code with the alternatives in one process and writes JSON + tables."""
