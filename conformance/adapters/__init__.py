"""Adapters that put other loaders behind torch's DataLoader constructor, for the suite.

* `conformance.adapters.torchdata:Loader`: torchdata's StatefulDataLoader (extra `torchdata`).
* `conformance.adapters.torchdata_nodes:ThreadLoader` / `:ProcessLoader`: a torchdata.nodes
  pipeline with a thread or a process `ParallelMapper` (extra `torchdata`).
* `conformance.adapters.spdl:Loader`: SPDL's `get_pytorch_dataloader` (extra `spdl`).
* `conformance.adapters.grain:Loader`: grain's `DataLoader` (extra `grain`).
* `conformance.adapters.paddle:Loader`: paddle.io.DataLoader (extra `paddle`).
* `conformance.adapters.litdata:Loader`: litdata's `StreamingDataLoader` (extra `litdata`).
* `conformance.adapters.streaming:Loader`: Mosaic streaming's `StreamingDataLoader` (extra
  `streaming`: streaming-community).

Each is an optional extra: importing an adapter without its package raises ImportError naming
the extra. The shared front (`conformance.adapters._front`) validates torch's arguments as torch
does and declares each adapter's limits: `Loader.loaderspec_unsupported(**kwargs)` says, in one
line, why a configuration cannot be expressed (None when it can), and the constructor raises
`NotImplementedError` with that line; the suite makes it a SKIP. Each adapter class states
`workers_die_with` ("iterator" or "loader"): what must be dropped for the loader's workers to
stop. torch's DataLoader and the reference loader behave as "iterator".
"""
