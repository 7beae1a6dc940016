"""granularity="auto": the per-block choice between one node per call and inlined ops."""
import statistics

from ..config import settings
from ..record import signature


def choose_granularity(plan):
    """After a flush of an "auto" scope, decide per hybridized block whether to inline it.

    A block is inlined from then on when its calls in this flush came in several signatures
    (arities, shapes) AND most of its batches were small (median size below
    settings.auto_min_batch): inlined, the primitive ops of those calls batch across
    signatures. A block whose calls batch well, or whose calls all share one signature
    (inlining cannot merge them), stays whole: one node per call is the cheaper graph to
    record and schedule. The choice is kept on the block (`block.auto_inline`), so it applies
    to later calls and scopes.
    """
    seen = {}
    for b, size in enumerate(plan.sizes):
        sig_id = plan.recorded_sig(b)       # as recorded, not as run
        owner = signature.SIGS[sig_id].op.owner_block
        if owner is not None:
            sizes, sigs = seen.setdefault(owner, ([], set()))
            sizes.append(size)
            sigs.add(sig_id)
    for owner, (sizes, sigs) in seen.items():
        if len(sigs) >= 2 and statistics.median(sizes) < settings.auto_min_batch:
            object.__setattr__(owner, "auto_inline", True)
