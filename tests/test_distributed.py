"""hb.distributed: 2 ranks of 32 instances per step train to the parameters of 1 rank of 64,
and a failing or hanging rank ends the job instead of leaving the others waiting. The
training runs are tests/mpi_training.py under `mpirun -n 2` on this machine."""
import importlib.util
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.train import distributed

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_training.py")
MPIRUN = shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(
    MPIRUN is None or importlib.util.find_spec("mpi4py") is None,
    reason="needs mpirun and mpi4py (apt-get install openmpi-bin libopenmpi-dev; pip install mpi4py)")


def _launch(ranks, *args, timeout=120):
    """(exit status, output, seconds) of mpi_training.py on `ranks` ranks (1: a plain process)."""
    command = [sys.executable, SCRIPT, *args]
    if ranks > 1:
        command = [MPIRUN, "-n", str(ranks), "--oversubscribe", *command]
    # OpenMPI refuses to start as root without these
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


@needs_mpi
@pytest.mark.parametrize("optimizer,granularity", [("sgd", "block"), ("adam", "block"), ("adam", "op")])
def test_two_ranks_of_32_match_one_of_64(tmp_path, optimizer, granularity):
    outputs = {}
    for ranks in (1, 2):
        out = tmp_path / f"{ranks}.npz"
        status, output, _ = _launch(ranks, "--optimizer", optimizer, "--granularity", granularity,
                                    "--global-batch", "64", "--steps", "20", "--out", str(out))
        assert status == 0, output
        with np.load(out) as archive:
            outputs[ranks] = {name: archive[name] for name in archive.files}
    with np.load(tmp_path / "1.npz") as archive:
        assert set(archive.files) == {"table", "W", "b"}
    for name, value in outputs[1].items():
        np.testing.assert_allclose(outputs[2][name], value, rtol=1e-5, atol=1e-6, err_msg=name)


@needs_mpi
def test_a_failing_rank_ends_the_job():
    status, output, seconds = _launch(2, "--fail-at", "3", timeout=60)
    assert status != 0 and seconds < 30, output
    assert "rank 1 fails on purpose" in output and "rank 1 of 2 failed; aborting the job" in output


@needs_mpi
def test_a_hanging_rank_times_the_others_out():
    status, output, seconds = _launch(2, "--fail-at", "3", "--hang", "--timeout", "3", timeout=60)
    assert status != 0 and seconds < 30, output
    assert "rank 0 of 2 waited 3 s in allreduce_gradients" in output


def test_shards_interleave_into_the_global_minibatches():
    items = list(range(101))
    whole = distributed.shard(items, seed=5, epoch=2, rank=0, size=1)
    assert sorted(whole) == items and whole != distributed.shard(items, seed=5, epoch=3, rank=0, size=1)
    shards = [distributed.shard(items, seed=5, epoch=2, rank=rank, size=2) for rank in range(2)]
    assert len(shards[0]) == len(shards[1]) == 50        # the 101st item is left out this epoch
    for k in range(0, 48, 8):                             # minibatch k of 8 per rank: of 16 in one process
        assert sorted(shards[0][k:k + 8] + shards[1][k:k + 8]) == sorted(whole[2 * k:2 * k + 16])


def test_without_mpi4py_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(distributed, "_world", None)
    monkeypatch.setitem(sys.modules, "mpi4py", None)      # import fails as if not installed
    with pytest.raises(hb.distributed.DistributedError, match=r"pip install 'hybridbatch\[distributed\]'"):
        hb.distributed.init()


@needs_mpi
def test_ranks_draw_their_own_dropout_masks():
    status, output, _ = _launch(2, "--masks")
    assert status == 0 and "masks differ: True" in output, output
    status, output, _ = _launch(1, "--masks")
    assert status == 0 and "masks differ: False" in output, output


@needs_mpi
def test_parameters_unlike_rank_0s_are_named_on_every_rank():
    status, output, seconds = _launch(2, "--rank1-rows", str(45), timeout=60)
    assert status != 0 and seconds < 30, output
    assert "rank 1's parameters differ from rank 0's: 'table' (45, 6) float32 where rank 0 has 'table' (40, 6)" \
        in output, output


@needs_mpi
def test_two_ranks_train_float16_parameters_as_one(tmp_path):
    outputs = {}
    for ranks in (1, 2):
        out = tmp_path / f"{ranks}.npz"
        status, output, _ = _launch(ranks, "--dtype", "float16", "--steps", "6", "--out", str(out))
        assert status == 0, output
        with np.load(out) as archive:
            outputs[ranks] = {name: archive[name] for name in archive.files}
    for name, value in outputs[1].items():
        assert value.dtype == np.float16
        np.testing.assert_allclose(outputs[2][name], value, rtol=2e-2, atol=2e-3, err_msg=name)
