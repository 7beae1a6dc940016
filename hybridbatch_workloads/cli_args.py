"""argparse types shared by the command lines: `python -m hybridbatch.bench` and the
training examples take the same --policy values and the same ranges of sizes and counts,
checked by the functions here."""
import argparse
import math
import os

from hybridbatch.schedule import POLICIES
from hybridbatch.schedule.fsm import FSMPolicy


def policy_arg(value):
    """--policy: a built-in policy's name, or the path of a learned policy saved by
    FSMPolicy.save (hb.learn_policy), loaded here so that a bad value is a usage error."""
    if value in POLICIES:
        return value
    if os.path.isfile(value):
        try:
            return FSMPolicy.load(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    raise argparse.ArgumentTypeError(f"{value!r} is neither a policy ({', '.join(sorted(POLICIES))}) "
                                     f"nor a saved FSM policy file")


def int_at_least(low):
    """An argparse type: an integer >= low. A size or count out of range would otherwise
    die deep in a run (--hidden 0 in a ZeroDivisionError) rather than as a usage error."""
    def parse(value):
        try:
            n = int(value)
        except ValueError:
            n = None
        if n is None or n < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value!r}")
        return n
    return parse


def positive_float(value):
    """An argparse type for --lr: a finite number > 0 (0, negative or nan would not train)."""
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value!r}")
    return x
