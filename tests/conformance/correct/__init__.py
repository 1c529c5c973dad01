"""Correct loaders written independently of torch's loader code, one per worker design: threads
(`correct.threads`), a `multiprocessing.Pool` (`correct.pool`), forked processes talking over
pipes (`correct.pipes`) and one `ProcessPoolExecutor` per worker, batches handed back as files
(`correct.executors`). They keep the conformance suite honest about designs other than torch's:
graded against the whole suite, none may FAIL, except where docs/conformance.md names a real
limit of the design. The broken loaders in `tests/conformance/broken/` subclass them."""
