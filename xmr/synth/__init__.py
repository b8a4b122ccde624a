"""D′: the synthetic dataset of images with co-occurring objects removed and captions rewritten,
built on Ray Data (configuration, rows, stages, output shards, the build driver, the report).

Removal planning and the fills themselves are in :mod:`xmr.removal`.
"""
