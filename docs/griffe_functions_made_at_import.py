"""A griffe extension for the API reference: hybridbatch.api makes some public functions at
import (hb.tanh and the other unary elementwise ops from their op classes, hb.sum and the
other reductions from a factory), which reading the source cannot see. This imports the
module and adds those functions, with their docstrings and signatures, beside the ones
read from the source, so every other object keeps its signature as written."""
import sys

import griffe


class FunctionsMadeAtImport(griffe.Extension):
    def on_module(self, *, mod, loader, **kwargs):
        if mod.path != "hybridbatch.api":
            return
        # imported from the checkout being documented, whatever the environment has installed
        sys.path.insert(0, str(mod.package.filepath.parent.parent))
        try:
            imported = griffe.inspect(mod.path)
        finally:
            del sys.path[0]
        for name, member in imported.members.items():
            if member.is_alias or not member.is_function or name.startswith("_"):
                continue
            known = mod.members.get(name)
            if known is None or known.is_attribute:
                mod.set_member(name, member)
