"""numba twins of peers' random streams: MT19937 (``mt19937``), numpy's legacy shuffle
(``legacy_shuffle``), torch's randperm (``torch_randperm``), and the block prefetch they share."""
