"""Benchmarks of steerable beside its peers; run each as ``python -m bench.<name>``.

See ``bench/README.md`` for what each one measures, and ``docs/benchmarks.md`` for figures.
"""
