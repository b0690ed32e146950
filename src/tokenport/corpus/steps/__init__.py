"""Cleaning steps between reading and tokenizing (filters, deduplication, scrubbers) and their registry
(``registry``)."""
