"""argparse types shared by the command lines: `python -m hybridbatch.bench` and the
training examples take the same --policy values, checked by the one function here."""
import argparse
import os

from .schedule import POLICIES
from .schedule.fsm import FSMPolicy


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
