"""The TLA+ spec as package data: ``loaderspec.spec`` in an installed wheel, ``spec/`` here."""
