"""Adapters that put other loaders behind torch's DataLoader constructor, for the suite.

* `conformance.adapters.paddle:Loader`: paddle.io.DataLoader (needs paddlepaddle).
* `conformance.adapters.torchdata:Loader`: torchdata's StatefulDataLoader (needs torchdata).

Both are optional extras: importing an adapter without its package raises ImportError naming it.
Each adapter class states `workers_die_with` ("iterator" or "loader"): what must be dropped for
the loader's workers to stop. torch's DataLoader and the reference loader behave as "iterator".
"""
