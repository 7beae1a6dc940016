"""W7 of docs/workloads.md as a benchmark workload: the IEP module network (`models/module_net.py`).

Data: with `data_dir` (the `clevr_programs` folder or its parent), the programs of
`CLEVR_train_*.json` train and those of `CLEVR_val_*.json` are held out; without it,
`synthetic_programs` (10-25 nodes, the 40 `CLEVR_FUNCTIONS`; dev drawn with another seed).
The model has a module per function of `CLEVR_FUNCTIONS` and of the data. Neither source
comes with image features or, through the reader, answers, so each question gets stand-ins:
a scene feature map of standard normal values (channels x 8 x 8, drawn once per question,
seeded) in place of the CNN features of its image, and a synthetic answer, the vocabulary
index of the function feeding the answer node, modulo 28.

Run as a module, it reads bench JSON files and prints each one's forward-execution
speedup, the figure Suarez & Zhu call module execution: the seconds the eager forward takes
per instance (every op of every module and of the classifier, run one instance at a time)
over the seconds the batched forward's plan execution takes per instance (the scope's
execute time: every module and classifier batch, with the gathering of their operands;
recording and scheduling left out), for training and for inference.

    python -m hybridbatch_workloads.bench.workload_module_net w7.json [more.json ...]
"""
from __future__ import annotations

import functools
import glob
import json
import os
import sys
from typing import NamedTuple

import numpy as np

from ..data.clevr import CLEVR_FUNCTIONS, read_clevr_programs, synthetic_programs
from ..data.errors import DataFormatError, described
from ..models.module_net import ModuleNetwork
from .workload import Workload, scaled

__all__ = ["Question", "W7ModuleNet", "forward_execution_speedup"]

SIDE = 8
ANSWERS = 28


class Question(NamedTuple):
    """One instance: its program (`ProgramNode`s, answer node last), its scene feature map
    and its answer id."""
    program: list
    scene: np.ndarray
    answer: int


def _program_files(data_dir, split):
    """The sorted `CLEVR_<split>_*.json` files in `data_dir` or in its `clevr_programs/`."""
    for d in (data_dir, os.path.join(data_dir, "clevr_programs")):
        files = sorted(glob.glob(os.path.join(d, f"CLEVR_{split}_*.json")))
        if files:
            return files
    raise FileNotFoundError(f"no CLEVR_{split}_*.json in {data_dir} or in {os.path.join(data_dir, 'clevr_programs')}")


@functools.lru_cache(maxsize=4)
def _programs(data_dir, seed, synthetic_train, synthetic_dev):
    """(train programs, dev programs), cached so that a sweep reads or draws them once."""
    if data_dir is None:
        return (tuple(synthetic_programs(synthetic_train, seed=seed)),
                tuple(synthetic_programs(synthetic_dev, seed=seed + 7919)))
    sets = []
    for split in ("train", "val"):
        programs = [p for f in _program_files(data_dir, split) for p in read_clevr_programs(f, with_values=True)]
        if not programs:
            raise DataFormatError("at least one program", found=described("none"),
                                  filename=_program_files(data_dir, split)[0])
        sets.append(tuple(programs))
    return tuple(sets)


def program_functions(programs):
    """`CLEVR_FUNCTIONS` and every other function the programs call, name -> arity (the
    number of inputs its nodes have; one function called with two arities is an error)."""
    functions = dict(CLEVR_FUNCTIONS)
    for program in programs:
        for node in program:
            arity = functions.setdefault(node.function, len(node.inputs))
            if arity != len(node.inputs):
                raise ValueError(f"function {node.function!r} is called with {len(node.inputs)} inputs "
                                 f"and elsewhere with {arity}")
    return functions


class W7ModuleNet(Workload):
    name = "W7"
    description = ("IEP module network: a residual conv module per program function (40 + those of the data), "
                   "feature map channels x 8 x 8, classifier conv1x1 -> linear 28 answers")

    def __init__(self, hidden=256, data_dir=None, seed=0, synthetic_train=2000, synthetic_dev=300):
        super().__init__(hidden, data_dir, seed)
        # docs/workloads.md's 32 channels at hidden 256; --hidden scales them
        self.channels = scaled(32, hidden)
        train, dev = _programs(None if data_dir is None else os.fspath(data_dir), seed,
                               synthetic_train, synthetic_dev)
        self.data_source = "synthetic_programs" if data_dir is None else f"CLEVR programs {data_dir}"
        self.functions = program_functions(train + dev)
        self.vocabulary = list(self.functions)
        rng = np.random.default_rng(seed + 1)
        self._train = [self._question(p, rng) for p in train]
        self._dev = [self._question(p, rng) for p in dev]
        self.model = ModuleNetwork(self.functions, channels=self.channels, side=SIDE, answers=ANSWERS,
                                   seed=seed)

    def _question(self, program, rng):
        scene = rng.standard_normal((self.channels, SIDE, SIDE)).astype(np.float32)
        feeding = program[program[-1].inputs[0]].function if program[-1].inputs else program[-1].function
        return Question(program, scene, self.vocabulary.index(feeding) % ANSWERS)

    def loss(self, instance):
        return self.model.loss(instance.program, instance.scene, instance.answer)

    def predict(self, instance):
        return self.model.logits(instance.program, instance.scene)

    def read_prediction(self, prediction):
        """The answer logits (one array: a question has one answer)."""
        return prediction.asnumpy()

    def score(self, instance, logits):
        return int(np.argmax(logits) == instance.answer), 1

    def forward_flops(self, instance):
        """2 per MAC over the 8 x 8 positions: two conv3x3 (C x 9C) per node, a conv1x1
        (C x 2C) more per two-input node, and the classifier's conv1x1 (C x C) and linear
        layer (28 x 64C)."""
        C, P = self.channels, SIDE * SIDE
        macs = sum(2 * C * 9 * C * P + (2 * C * C * P if len(node.inputs) == 2 else 0)
                   for node in instance.program)
        return 2 * (macs + C * C * P + ANSWERS * C * P)


def forward_execution_speedup(result):
    """{"train": x, "infer": x}: eager forward seconds per instance over batched forward
    (plan execution) seconds per instance, from a `run_benchmark` result with eager runs."""
    if not result.get("eager"):
        raise ValueError("the result has no eager runs (--no-eager): no forward-execution speedup")
    out = {}
    for phase in ("train", "infer"):
        b, e = result["batched"][phase], result["eager"][phase]
        out[phase] = (e["split_seconds"]["forward"] / e["instances"]) / (b["split_seconds"]["forward"] / b["instances"])
    return out


def main(paths):
    """Print each result file's speedups; a file that is not a bench result with eager runs
    exits with its path and what is wrong with it."""
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                result = json.load(f)
            if not isinstance(result, dict) or "batched" not in result or "config" not in result:
                raise ValueError("not a `python -m hybridbatch.bench` result of one workload")
            s = forward_execution_speedup(result)
        except (OSError, ValueError) as e:      # JSONDecodeError is a ValueError
            sys.exit(f"{path}: {e}")
        c = result["config"]
        print(f"{path}: {result['workload']} policy {c['policy']} batch {c['batch']}: forward execution "
              f"{s['train']:.1f}x (train), {s['infer']:.1f}x (infer); end to end {result['speedup']['train']:.1f}x "
              f"(train), {result['speedup']['infer']:.1f}x (infer)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(f"usage: python -m {__spec__.name} RESULT.json [RESULT.json ...]")
    main(sys.argv[1:])
