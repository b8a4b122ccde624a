"""The BiAug method's D′: source examples, hard-negative groups, their stages.

:class:`~xmr.synth.biaug.method.BiAugMethod` is what the runner builds with; the method's
prompts, answer parsing, filters and oracle are in :mod:`xmr.biaug`.
"""
