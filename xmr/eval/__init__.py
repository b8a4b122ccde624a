"""Evaluation: encode with a model on Ray, compute the papers' metrics, report and log them.

- :mod:`~xmr.eval.config`: what one evaluation is (``EvalConfig``, built from the flags);
- :mod:`~xmr.eval.protocol`: which images and texts are each metric's queries and galleries;
- :mod:`~xmr.eval.encoders`, :mod:`~xmr.eval.encode`: encode a split once (on Ray or in memory);
- :mod:`~xmr.eval.clip`: CLIP-clip, the embedding dimensions dropped before scoring;
- :mod:`~xmr.eval.score`: Recall@K, ODmAP@K and Bias@K of an encoded split; ``evaluate``;
- :mod:`~xmr.eval.intervals`: each metric's bootstrap interval over its queries (the per-query
  values behind the metrics, and their pairing, are :mod:`xmr.compare`'s);
- :mod:`~xmr.eval.product_retrieval`: EI-CLIP's product-retrieval protocols and SumR;
- :mod:`~xmr.eval.report`, :mod:`~xmr.eval.options`: the table, JSON, MLflow run; the flags.

Import from the modules: this package imports nothing, so reading ``xmr eval``'s options loads
neither torch nor Ray (and no module here imports Ray until a split is encoded on it).
"""
