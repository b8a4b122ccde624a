"""D′: a synthetic dataset built from a real one by a method, resumably.

:mod:`~xmr.synth.runner` is the build every method shares (out-dir check, plan persistence,
shards and resume, retries, errors, manifest); a method (:class:`~xmr.synth.runner.SynthMethod`)
brings its plan and stages: :mod:`~xmr.synth.removal` (the odmap paper's object removal) and
:mod:`~xmr.synth.biaug` (BiAug's attribute edits and hard negatives), chosen by ``--mode`` in
:mod:`~xmr.synth.methods`. Also here: the configuration, the inputs, the output files, retries,
the report, and the ``xmr synth`` command.
"""
