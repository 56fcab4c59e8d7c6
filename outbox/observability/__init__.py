"""Metrics and tracing, which every other part reports through.

So they import no other part of the kernel.
"""
