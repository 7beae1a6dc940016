"""The arrays a policy schedules over."""
from dataclasses import dataclass

import numpy as np


@dataclass
class GraphView:
    """One flush's pending nodes, renumbered 0..n-1.

    sig: compact signature per node (0..n_sigs-1); args: local ids of each node's operands,
    -1 for values computed in an earlier flush (already available); executable: False for
    inputs. Per signature: unbatchable flags, op cost (agenda tie-break) and a stable key
    (type_keys.py) by which a learned policy knows the signature in any flush or process.
    """
    sig: np.ndarray
    depth: np.ndarray
    arg_ptr: np.ndarray
    args: np.ndarray
    executable: np.ndarray
    unbatchable: np.ndarray
    cost: np.ndarray
    sig_keys: tuple = ()

    @property
    def n_sigs(self):
        return len(self.unbatchable)
