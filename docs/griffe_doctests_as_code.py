"""A griffe extension for the API reference: a docstring's doctest examples (a `>>> ` line,
its `... ` continuations and its output, up to a blank line) become fenced `pycon` code, so
the site shows them as code instead of reading them as Markdown (blockquotes, and list
comprehensions taken for reference links). Listed after FunctionsMadeAtImport, whose
functions it fences when their module is loaded; the rest once the package is."""
import griffe

FENCE = "```pycon"


def fence(text):
    """text with each doctest run wrapped in a ```pycon fence (text already fenced as is)."""
    if FENCE in text:
        return text
    out, inside, indent = [], False, ""
    for line in text.splitlines():
        stripped = line.strip()
        if not inside and stripped.startswith(">>>"):
            indent = line[:len(line) - len(line.lstrip())]
            out.append(indent + FENCE)
            inside = True
        elif inside and not stripped:
            out.append(indent + "```")
            inside = False
        out.append(line)
    if inside:
        out.append(indent + "```")
    return "\n".join(out)


def _fence_all(obj):
    todo = [obj]
    while todo:
        obj = todo.pop()
        if obj.docstring is not None:
            obj.docstring.value = fence(obj.docstring.value)
        todo.extend(m for m in obj.members.values() if not m.is_alias)


class DoctestsAsCode(griffe.Extension):
    def on_module(self, *, mod, **kwargs):
        _fence_all(mod)

    def on_package(self, *, pkg, **kwargs):
        _fence_all(pkg)
