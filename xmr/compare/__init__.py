"""Is B different from A? Paired statistics over the queries two runs scored, their verdicts,
the runs found in the tracking store, and ``xmr compare``'s tables. No Ray: comparing reads the
tracking store and resamples numbers.

- :mod:`~xmr.compare.bootstrap`: bootstrap intervals of per-query means and of paired
  differences (numpy only), and the one declaration of their defaults (resamples, confidence,
  seed);
- :mod:`~xmr.compare.per_query`: per-query values (``per_query.parquet``, what evaluations and
  training runs log) and reading a run's back;
- :mod:`~xmr.compare.paired`: two runs' query sets paired (``B − A`` with its interval), runs
  the test set cannot tell apart (a sweep's Pareto ties), two runs by id or name;
- :mod:`~xmr.compare.verdict`: ``B better``, ``A nearer 0``, ``≈``; ``*`` after a significant
  change;
- :mod:`~xmr.compare.runs`: a run by its id or name, a sweep's trials, an experiment's runs,
  and their MLflow status;
- :mod:`~xmr.compare.table`: runs side by side, two runs paired (rich tables, JSON).

Import from the modules: this package imports nothing, so the statistics load neither pandas
nor MLflow.
"""
