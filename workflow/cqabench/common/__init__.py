"""Helpers every stage uses: atomic I/O, errors, progress lines, job memory, secret redaction, provenance, the results layout."""
