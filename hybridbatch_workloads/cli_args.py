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


def output_file(value):
    """An argparse type for --json, --plot, --save: a file path that can be written, its folder
    created now. They are written after the run, which would otherwise die on a bad path
    after minutes of measuring."""
    folder = os.path.dirname(os.path.abspath(value))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write {value!r}: cannot create the folder {folder} "
                                         f"({e.strerror})") from None
    if os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"cannot write {value!r}: it is a folder")
    target = os.path.realpath(value)        # a symlink's target: the file the probe may make
    if os.path.exists(target) and not os.path.isfile(target):
        return value                        # a pipe or device: opening it could block
    existed = os.path.exists(target)
    try:            # opening is the test: os.access says yes to root even in /proc
        with open(target, "a"):
            pass
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write {value!r}: {e.strerror}") from None
    if not existed:
        os.remove(target)
    return value


def summary(doc):
    """A module docstring's first paragraph on one line: a command's --help description."""
    return " ".join(doc.split("\n\n")[0].split())
