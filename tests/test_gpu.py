"""The cupy backend: batched equals eager on the GPU. Skips cleanly without cupy and a device."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.runtime import backend

pytestmark = pytest.mark.skipif(not backend.gpu_available(),
                                reason="cupy with a CUDA device is not available on this machine")


def test_batched_chains_match_eager_on_gpu():
    backend.use("cupy")
    try:
        rng = np.random.default_rng(0)
        W = hb.Parameter("W", (8, 12), rng=rng)
        b = hb.Parameter("b", (8,), init="zeros")
        xs = [rng.standard_normal(4).astype(np.float32) for _ in range(6)]

        def losses():
            out = []
            for n in (2, 4, 6):
                h = np.zeros(8, np.float32)
                for x in xs[:n]:
                    h = hb.tanh(W @ hb.concat([h, x]) + b)
                out.append(hb.pick_neg_log_softmax(h, n % 8))
            return hb.add_n(out)

        eager = losses()
        eager.backward()
        grad = backend.to_numpy(W.grad).copy()
        W.zero_grad()
        b.zero_grad()
        with hb.batching():
            batched = losses()
        batched.backward()
        np.testing.assert_allclose(batched.asnumpy(), eager.asnumpy(), rtol=1e-5)
        np.testing.assert_allclose(backend.to_numpy(W.grad), grad, rtol=1e-4, atol=1e-6)
    finally:
        backend.use("numpy")
