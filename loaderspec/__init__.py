"""loaderspec: the spec, its model checks, trace validation and conformance reports."""

__version__ = "0.2.0"
