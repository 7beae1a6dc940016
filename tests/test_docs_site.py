"""The documentation site's sources agree with the files they name, without mkdocs: `make
docs` builds it with the docs extra, which `make test` does not install."""
import importlib.util
import pathlib
import re

import hybridbatch as hb

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", DOCS / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_nav_names_existing_pages():
    config = (ROOT / "mkdocs.yml").read_text()
    nav = config[config.index("\nnav:"):]
    pages = re.findall(r"^\s*-\s+(?:[^:\n]+:\s+)?(\S+\.md)\s*$", nav, re.M)
    assert len(pages) > 10, pages
    missing = [p for p in pages if not (DOCS / p).is_file()]
    assert not missing, f"mkdocs.yml's nav names pages that docs/ lacks: {missing}"


def test_every_include_line_finds_its_file_and_heading():
    """A page made of sections of user_guide.md (or another file) breaks when a heading is
    renamed: _section raises ValueError naming the heading."""
    hooks = _hooks()
    included = []
    for page in sorted(DOCS.rglob("*.md")):
        for path, title in hooks._includes(str(page)):
            assert pathlib.Path(path).is_file(), f"{page.name} includes {path}, which does not exist"
            assert hooks._section(path, title).strip(), f"{page.name}: {title!r} of {path} is empty"
            included.append(title)
    assert "Value-dependent models (`hb.map`)" in included


def test_every_public_name_is_in_the_api_reference():
    """Each name of hb.__all__ is the target of a `:::` line, in a `members` list, or
    a member of a module that a `:::` line documents whole."""
    targets, members, whole_modules = set(), set(), set()
    for page in (DOCS / "reference").glob("*.md"):
        for block in re.split(r"\n(?=::: )", page.read_text()):
            m = re.match(r"::: (\S+)", block)
            if m is None:
                continue
            targets.add(m.group(1).rsplit(".", 1)[-1])
            listed = re.search(r"members: \[(.*)\]", block)
            if listed:
                members.update(n.strip() for n in listed.group(1).split(","))
            else:
                whole_modules.add(m.group(1))
    missing = [name for name in hb.__all__
               if name not in targets | members
               and getattr(getattr(hb, name), "__module__", None) not in whole_modules]
    assert not missing, f"the API reference (docs/reference/) leaves out {missing}"
