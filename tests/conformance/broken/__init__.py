"""Deliberately broken loaders, one bug each: fixtures showing every conformance case can fail.

Most are thin wrappers around the reference loader's public API (``_wrap.Wrapped``); the few
bugs that live inside the protocol (the prefetch window, retiring exhausted workers) subclass
torch's DataLoader and touch its private parts, which is allowed here and only here.
"""
