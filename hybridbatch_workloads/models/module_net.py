"""W7: the execution engine of an IEP module network (Johnson et al. 2017), one question per call.

Every function of the program vocabulary has its own module, a HybridBlock on a
(channels, 8, 8) feature map: a `ResidualModule` (conv3x3 -> relu -> conv3x3 -> + input ->
relu) for arity 0 and 1, a `CombineModule` (the two inputs concatenated, projected by a
relu conv1x1, then a residual block) for arity 2. `scene` is a module too, run on the
question's scene features, as in IEP. A `Classifier` (relu conv1x1 -> flatten -> linear)
gives the answer logits. The model walks one program tree by plain recursion from its
answer node; inside `hb.batching()` the calls of a minibatch's programs batch by function.
"""
from __future__ import annotations

import hybridbatch as hb
from hybridbatch import nn

__all__ = ["ResidualModule", "CombineModule", "Classifier", "ModuleNetwork"]

BRANCH_SCALE = 0.1


class ResidualModule(hb.HybridBlock):
    """relu(conv3x3(relu(conv3x3(x))) + x).

    The second convolution starts at a tenth of its Xavier scale (a residual branch that
    starts small, as in Fixup): with full-scale branches the map grows module after module,
    and 25 modules deep SGD at rate 0.05 diverges."""

    def __init__(self, channels, seed=0):
        super().__init__()
        self.first = nn.Conv2D(channels, channels, 3, activation="relu", seed=seed)
        self.second = nn.Conv2D(channels, channels, 3, seed=seed + 1)
        self.second.weight.data = self.second.weight.data * BRANCH_SCALE

    def forward(self, x):
        return hb.relu(self.second(self.first(x)) + x)


class CombineModule(hb.HybridBlock):
    """A two-input function: concatenate along the channels, relu conv1x1 back to `channels`,
    then a residual block."""

    def __init__(self, channels, seed=0):
        super().__init__()
        self.project = nn.Conv2D(channels, 2 * channels, 1, activation="relu", seed=seed)
        self.residual = ResidualModule(channels, seed=seed + 1)

    def forward(self, a, b):
        return self.residual(self.project(hb.concat([a, b], axis=0)))


class Classifier(hb.HybridBlock):
    """relu conv1x1 -> flatten -> linear to the answers."""

    def __init__(self, channels, side, answers, seed=0):
        super().__init__()
        self.project = nn.Conv2D(channels, channels, 1, activation="relu", seed=seed)
        self.output = nn.Dense(answers, channels * side * side, seed=seed + 1)

    def forward(self, x):
        return self.output(hb.flatten(self.project(x)))


class ModuleNetwork(hb.Block):
    """`loss(program, scene, answer)` / `logits(program, scene)` of one question.

    `functions` maps each function name to its arity (0, 1 or 2); a program is a list of
    `(function, inputs)` nodes whose inputs index earlier nodes, the answer node last
    (`hybridbatch_workloads.data.clevr`). `scene` is the question's (channels, side, side)
    feature map.
    """

    def __init__(self, functions, channels=32, side=8, answers=28, seed=0):
        super().__init__()
        bad = {f: a for f, a in functions.items() if a not in (0, 1, 2)}
        if bad:
            raise ValueError(f"module arities must be 0, 1 or 2, not {bad}")
        self.arity = dict(functions)
        self.index = {f: i for i, f in enumerate(functions)}
        for f, i in self.index.items():
            module = CombineModule if functions[f] == 2 else ResidualModule
            setattr(self, f"module{i}", module(channels, seed=seed + 3 * i))
        self.classifier = Classifier(channels, side, answers, seed=seed + 3 * len(functions))

    def module(self, function):
        if function not in self.index:
            raise KeyError(f"no module for function {function!r}: the model knows {len(self.index)} functions")
        return getattr(self, f"module{self.index[function]}")

    def execute(self, program, scene, node=None):
        """The feature map of `node` (by default the answer node): its inputs' maps, recursively,
        through its function's module; a node without inputs reads the scene."""
        node = len(program) - 1 if node is None else node
        function, inputs = program[node]
        module = self.module(function)
        if len(inputs) != self.arity[function]:
            raise ValueError(f"node {node} ({function}) has {len(inputs)} inputs; its module takes "
                             f"{self.arity[function]}")
        args = [self.execute(program, scene, j) for j in inputs] if inputs else [scene]
        return module(*args)

    def logits(self, program, scene):
        return self.classifier(self.execute(program, scene))

    def loss(self, program, scene, answer):
        return hb.pick_neg_log_softmax(self.logits(program, scene), answer)
