"""Adapters that put other loaders behind torch's DataLoader constructor, for the suite.

One module per adapted loader; which class of which module, its package and its extra are listed
once, in `loaderspec.graded.ADAPTERS` (docs/conformance.md, "Adding an adapter").

Each is an optional extra: importing an adapter without its package raises ImportError naming
the extra. The shared front (`conformance.adapters._front`) validates torch's arguments as torch
does and declares each adapter's limits: `Loader.loaderspec_unsupported(**kwargs)` says, in one
line, why a configuration cannot be expressed (None when it can), and the constructor raises
`NotImplementedError` with that line; the suite makes it a SKIP. Each adapter class states
`workers_die_with` ("iterator" or "loader"): what must be dropped for the loader's workers to
stop. torch's DataLoader and the reference loader behave as "iterator".
"""
