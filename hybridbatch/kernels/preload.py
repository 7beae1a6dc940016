"""hybridbatch's numba functions loaded from numba's disk cache in a background thread.

numba loads a cached function on its first call, 2-12 ms each, and a process's first flush
calls some twenty of them (the plan's helpers, gathers, products, updates). `start()`, at
`import hybridbatch`, loads every cached overload of the package's modules imported by then
(float64 ones and others a run may never call included: 80-odd, about 0.25 s, in a
developer's cache) while the user's script goes on to read its data and build its model; a
function called before its turn waits on numba's compiler lock and then finds itself
loaded. It takes only entries whose index key matches the code and the machine and whose
data file is there; numba would compile one whose data it then cannot read, as it does on
a first call. HYBRIDBATCH_PRELOAD=0 turns it off (the kernel compile worker does: it never
runs these functions).

A fork ends the loading: the hook waits for the function being loaded, unless the forking
thread holds numba's compiler lock (the loader then waits for it, holding nothing). At exit
it stops the same way. It reads numba's cache index (`Dispatcher._cache`), which is not
public API: any failure just ends the loading early.
"""
import atexit
import logging
import os
import sys
import threading

from numba.core.compiler_lock import global_compiler_lock

log = logging.getLogger("hybridbatch")

_thread = None
_stop = threading.Event()


def start():
    """Begin loading in a daemon thread, unless HYBRIDBATCH_PRELOAD=0."""
    global _thread
    if _thread is None and os.environ.get("HYBRIDBATCH_PRELOAD", "1") != "0":
        _thread = threading.Thread(target=_load_cached, name="hybridbatch-preload", daemon=True)
        _thread.start()


def wait():
    """Block until the loading has ended (at once where it never started)."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()


def _stop_and_wait():
    """End the loading after the function being loaded (a fork, the exit)."""
    _stop.set()
    if not global_compiler_lock.is_locked():      # held here, the loader waits for it: joining would hang
        wait()


def _load_cached():
    try:
        from numba.core.registry import CPUDispatcher
        count = 0
        for name, module in list(sys.modules.items()):
            if _stop.is_set():
                break
            if not name.startswith("hybridbatch.") or getattr(getattr(module, "__spec__", None), "_initializing", False):
                continue        # a module still importing: numba's load would import it again, and wait
            for value in list(vars(module).values()):
                if isinstance(value, CPUDispatcher) and value.__module__ == name:
                    count += _load(value)
        log.debug("loaded %d compiled functions from numba's cache ahead of their first call", count)
    except Exception as e:      # noqa: BLE001 -- an optimization: each function loads on its first call instead
        log.debug("loading compiled functions ahead of use stopped: %s: %s", type(e).__name__, e)


def _load(dispatcher):
    """Load the dispatcher's cached overloads made from its current code on this machine."""
    cache = getattr(dispatcher._cache, "_cache_file", None)
    if cache is None:           # not cached (cache=False)
        return 0
    codegen = dispatcher.targetctx.codegen()
    count = 0
    for key, data_name in cache._load_index().items():
        if _stop.is_set():
            break
        sig = key[0]
        if (sig not in dispatcher.overloads and dispatcher._cache._index_key(sig, codegen) == key
                and os.path.exists(cache._data_path(data_name))):
            dispatcher.compile(sig)
            count += 1
    return count


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_stop_and_wait)
atexit.register(_stop_and_wait)
