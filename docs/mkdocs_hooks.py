"""mkdocs hooks: the site's topic pages are made of sections of the repository's markdown.

A line `<!-- include FILE "Heading" -->` in a page is replaced by that heading's section of
FILE (the heading line and everything up to the next heading of its level or higher);
`<!-- include FILE -->` takes the whole file. FILE is relative to the page, and may lie
outside docs/ (benchmarks/RESULTS.md). With ` as title` after the heading, the section's
headings move up so that its own is the page's title. So docs/user_guide.md stays one file
for GitHub readers while the site splits it into pages, and no text is kept twice.

Links are then made to work where the text now stands: a relative link in included text is
rebased onto the including page, and a link (from any page) to a section or a file that
some page includes goes to that page, `#anchor` included.
"""
import logging
import os
import posixpath
import re

INCLUDE = re.compile(r'^<!-- include (\S+)(?: "(.*?)")?( as title)? -->$')
HEADING = re.compile(r"^(#{1,6}) (.*)$")
LINK = re.compile(r"\]\(([^)\s]+)\)")


class _StarredAll(logging.Filter):
    """Drops griffe's one complaint about `hybridbatch.__all__`, which adds a name per unary
    op with `*_UNARY` (api.UNARY, made at import) where static analysis sees no strings. The
    reference names every object by its module path, so that list is never read."""

    def filter(self, record):
        return "Unsupported item in hybridbatch.__all__" not in record.getMessage()


logging.getLogger("mkdocs.plugins.griffe").addFilter(_StarredAll())

# (absolute path of an included file, the slug of a heading in it, or None for the whole
# file) -> the src_uri of the page that includes it
_homes = {}
_docs_dir = ""


def _slug(title):
    """The anchor mkdocs gives a heading (markdown is imported here, so that the tests can
    check the include lines without the docs extra)."""
    from markdown.extensions.toc import slugify
    return slugify(re.sub(r"[`*_]", "", title).strip(), "-")


def _headings(lines):
    """(line index, level, title) of each heading outside fenced code."""
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            yield i, len(m.group(1)), m.group(2).strip()


def _section(path, title):
    """The text of `title`'s section of the file at `path` (the whole file when title is None)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if title is None:
        return text
    lines = text.splitlines(keepends=True)
    heads = list(_headings(lines))
    for k, (start, level, t) in enumerate(heads):
        if t == title:
            end = next((i for i, lv, _ in heads[k + 1:] if lv <= level), len(lines))
            return "".join(lines[start:end])
    raise ValueError(f"{path} has no heading {title!r}")


def _promoted(text):
    """A section's headings one level up per level its first heading is below the title."""
    lines = text.splitlines(keepends=True)
    heads = list(_headings(lines))
    up = heads[0][1] - 1
    for i, level, title in heads:
        lines[i] = "#" * (level - up) + " " + title + "\n"
    return "".join(lines)


def _includes(page_path):
    """(absolute path, heading title or None) of each include line of a page."""
    with open(page_path, encoding="utf-8") as f:
        for line in f:
            if m := INCLUDE.match(line.rstrip("\n")):
                yield os.path.normpath(os.path.join(os.path.dirname(page_path), m.group(1))), m.group(2)


def on_files(files, config):
    """Find which page includes which section, before any page is rendered."""
    global _docs_dir
    _docs_dir = os.path.abspath(config["docs_dir"])
    _homes.clear()
    for file in files.documentation_pages():
        for path, title in _includes(file.abs_src_path):
            text = _section(path, title)
            _homes[(path, None if title is None else _slug(title))] = file.src_uri
            if title is not None:
                for _, _, t in _headings(text.splitlines()):
                    _homes.setdefault((path, _slug(t)), file.src_uri)
    return files


def _relink(text, origin, page):
    """The links of `text`, written in the file `origin`, as seen from `page`."""
    page_uri = page.file.src_uri
    own = origin == page.file.abs_src_path

    def target(match):
        url = match.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", url) or url.startswith("/") or (own and url.startswith("#")):
            return match.group(0)
        path, _, anchor = url.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(origin), path)) if path else origin
        home = (anchor and _homes.get((dest, anchor))) or _homes.get((dest, None))
        if home is None:
            if not dest.startswith(_docs_dir + os.sep):
                return match.group(0)       # outside the site: mkdocs reports it
            home = os.path.relpath(dest, _docs_dir).replace(os.sep, "/")
        rel = posixpath.relpath(home, posixpath.dirname(page_uri) or ".")
        if home == page_uri and anchor:
            rel = ""
        return f"]({rel}{'#' + anchor if anchor else ''})"

    return LINK.sub(target, text)


def on_page_markdown(markdown, page, config, files):
    """Replace include lines by their sections, and point every link where its text now is."""
    page_path = page.file.abs_src_path
    out = []
    chunk = []
    for line in markdown.splitlines(keepends=True):
        m = INCLUDE.match(line.rstrip("\n"))
        if m is None:
            chunk.append(line)
            continue
        out.append(_relink("".join(chunk), page_path, page))
        chunk = []
        path = os.path.normpath(os.path.join(os.path.dirname(page_path), m.group(1)))
        text = _section(path, m.group(2))
        if m.group(3):
            text = _promoted(text)
        out.append(_relink(text, path, page))
    out.append(_relink("".join(chunk), page_path, page))
    return "".join(out)
