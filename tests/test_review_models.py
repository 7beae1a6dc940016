"""Review of nn blocks, models, the optimizer and ParameterDict: edge cases where a result was
silently wrong or a failure surfaced far from the user's line."""
import numpy as np

import hybridbatch as hb


def test_scalar_parameter_survives_parameter_dict_save_and_load(tmp_path):
    pd = hb.ParameterDict()
    scale = pd.get("scale", (), init=2.5)
    pd.get("W", (2, 3), init="normal")
    path = tmp_path / "p.npz"
    pd.save(path)
    with np.load(path) as f:
        assert f["scale"].shape == ()
    scale.data = np.float32(0.0)
    pd.load(path)
    assert scale.data.shape == () and float(scale.data) == 2.5
