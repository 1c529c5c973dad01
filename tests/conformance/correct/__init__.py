"""Correct loaders written independently of torch's loader code, one per worker design: threads
(`correct.threads`), a `multiprocessing.Pool` (`correct.pool`) and forked processes talking over
pipes (`correct.pipes`). They keep the conformance suite honest about designs other than torch's:
graded against the whole suite, none may FAIL, except where docs/conformance.md names a real
limit of the design. The broken loaders in `tests/conformance/broken/` subclass them."""
