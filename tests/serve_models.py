"""Models the serving tests put behind hb.serve.Batcher and `python -m hybridbatch.serve`."""
import numpy as np

import hybridbatch as hb

UNLUCKY = 13.0      # a request whose first number is this fails inside infer
BAD_AT_FLUSH = 7.0  # ... and this fails at the flush (its py_func raises), not at its own line


def _fail_on_seven(x):
    if x[0] == BAD_AT_FLUSH:
        raise ArithmeticError("seven cannot be squared here")
    return x * x


class Scorer:
    """y = tanh(W x + b) for x of 4 numbers, doubled where its sum is positive (a read of a
    value, so requests suspend and batch through hb.map)."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.W = hb.Parameter("W", (3, 4), init="normal", rng=rng)
        self.b = hb.Parameter("b", (3,), init="normal", rng=rng)

    def parse(self, payload):
        x = payload.get("x") if isinstance(payload, dict) else None
        if not (isinstance(x, list) and len(x) == 4 and all(isinstance(v, (int, float)) for v in x)):
            raise ValueError('expected {"x": [four numbers]}')
        return np.array(x, np.float32)

    def infer(self, x):
        if x[0] == UNLUCKY:
            raise RuntimeError("unlucky request")
        if x[0] == BAD_AT_FLUSH:
            x = hb.py_func(_fail_on_seven, hb.array(x), out_shape=(4,))
        h = hb.tanh(self.W @ x + self.b)
        return h * 2.0 if hb.sum(h) > 0 else h

    def respond(self, y):
        return {"y": y.tolist()}


class BadReply(Scorer):
    """Scorer whose reply cannot be written as JSON."""

    def respond(self, y):
        return {"y": {1, 2}}
