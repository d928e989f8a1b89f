"""``gpudissect predict``: cycles per iteration of SASS loops from the measured tables (issue 20).

One job per module: :mod:`source` reads the input (cubin, PTX, SASS listing), :mod:`loops`
finds the innermost loops, :mod:`graph` builds the dependence graph, :mod:`tables` reads the
per-SASS latencies and rates, :mod:`memory` the measured memory hierarchy (where a loop's loads
get their data, at what latency and bandwidth), :mod:`bounds` computes v0 (the bounds) and the baselines, :mod:`sched`
simulates one scheduler (model v1: the answer, what ``--validate`` scores, and the timeline),
:mod:`answer` and :mod:`render` make the printed answer.
"""

from __future__ import annotations


class PredictError(ValueError):
    """Input the predictor cannot use (the message is one line)."""
