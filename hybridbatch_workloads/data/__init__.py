"""Data for the reference workloads: readers of the real files and synthetic generators.

Real data is not shipped; `shared_data_dir()` finds it (`$HYBRIDBATCH_DATA` or
`../shared/data`). Every generator is deterministic in its seed and draws instances with the
size distribution of the real set, so benchmarks run without the data.

- SST trees (W1, W4): `read_ptb_trees`, `parse_ptb`, `synthetic_sst`, `Tree`, `Vocab`
- UD EWT (W2, W3, W9): `read_conllu`, `synthetic_tagging`, `Token`, `UPOS_TAGS`
- CLEVR programs (W7): `read_clevr_programs`, `synthetic_programs`, `ProgramNode`,
  `CLEVR_FUNCTIONS`
"""
from .errors import DataFormatError
from .paths import shared_data_dir
from .trees import Tree, Vocab, parse_ptb, read_ptb_trees, synthetic_sst, synthetic_words
from .conllu import Token, UPOS_TAGS, read_conllu, synthetic_tagging
from .clevr import (CLEVR_FUNCTIONS, ProgramNode, program_depth, read_clevr_programs,
                    synthetic_programs)

__all__ = [
    "DataFormatError", "shared_data_dir",
    "Tree", "Vocab", "parse_ptb", "read_ptb_trees", "synthetic_sst", "synthetic_words",
    "Token", "UPOS_TAGS", "read_conllu", "synthetic_tagging",
    "CLEVR_FUNCTIONS", "ProgramNode", "program_depth", "read_clevr_programs",
    "synthetic_programs",
]
