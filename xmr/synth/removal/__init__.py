"""The removal method's D′ (odmap paper): planned rows, their stages, their captions.

:class:`~xmr.synth.removal.method.RemovalMethod` is what the runner builds with; removal
planning and the fills themselves are in :mod:`xmr.removal`.
"""
