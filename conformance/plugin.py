"""pytest11 entry point of the conformance suite (placeholder until the suite lands)."""
