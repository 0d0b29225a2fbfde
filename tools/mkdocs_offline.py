"""mkdocs hook: the site renders its mathematics offline and loads nothing from other hosts.

MathJax 3 comes from the pinned ``django-static-mathjax`` package (its ``es5`` build; the
package needs no Django to be read). :func:`on_files` adds its combined TeX/MathML-to-CHTML
component, and the parts that component loads on demand (TeX extensions, CHTML fonts, the
menu and its accessibility modules), to the site under :data:`SITE_DIR`; ``mkdocs.yml``
loads :data:`SCRIPT` from there. A notebook page's loader of mermaid (nbconvert's, which
imports mermaid from a CDN where the page has a diagram) is dropped from a page without one
(:func:`on_post_page`). :func:`on_post_build` then reads every built page and fails the
build, naming the page and the address, where a page loads a script, a stylesheet, a font or
a module from another host (:func:`external_loads`).
"""

from __future__ import annotations

import re
from importlib import util
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

SITE_DIR = "javascripts/mathjax"
SCRIPT = f"{SITE_DIR}/tex-mml-chtml.js"
# what tex-mml-chtml.js loads by itself, relative to its own address
PARTS = ("tex-mml-chtml.js", "input", "output/chtml", "a11y", "ui", "sre", "adaptors")

_LOAD = re.compile(
    r"""<script\b[^>]*\bsrc\s*=\s*["']?(?P<script>[^"'\s>]+)"""
    r"""|<link\b[^>]*\bhref\s*=\s*["']?(?P<link>[^"'\s>]+)"""
    r"""|\bimport\b[^;"'()]*?\bfrom\s*["'](?P<module>[^"']+)["']"""
    r"""|\bimport\s*\(\s*["'](?P<dynamic>[^"']+)["']"""
    r"""|@import\s+(?:url\()?\s*["']?(?P<css>[^"')\s;]+)""",
    re.IGNORECASE,
)
#: nbconvert's mermaid loader, and a diagram it would render
_MERMAID_LOADER = re.compile(
    r"""<script type="module">(?:(?!</script>).)*?\bmermaid\b(?:(?!</script>).)*?</script>""",
    re.DOTALL,
)
_MERMAID_DIAGRAM = re.compile(r"""<div[^>]*\bclass\s*=\s*["'][^"']*\bjp-Mermaid\b""")
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
# a link the reader follows is not a load
_FOLLOWED = re.compile(r"""\brel\s*=\s*["']?(?:canonical|alternate|next|prev|author|license)""")


def mathjax_root() -> Path:
    """The directory of MathJax's ``es5`` build in the installed ``django-static-mathjax``."""
    spec = util.find_spec("mathjax")
    root = None
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax" / "es5"
    if root is None or not (root / PARTS[0]).is_file():
        raise PluginError(
            "the docs' MathJax is not installed: run bash tools/docs.sh, which installs the "
            "lock (constraints.txt), or pip install django-static-mathjax"
        )
    return root


def mathjax_files(root: Path) -> list[Path]:
    """Every file of :data:`PARTS` under ``root``, sorted."""
    found: list[Path] = []
    for part in PARTS:
        path = root / part
        found.extend([path] if path.is_file() else (p for p in path.rglob("*") if p.is_file()))
    return sorted(found)


def external_loads(html: str) -> list[str]:
    """The addresses on other hosts that a page's HTML loads (scripts, stylesheets, modules, fonts).

    A ``<link>`` the reader follows (``rel="canonical"`` and the like) loads nothing and is
    not counted; nor is an ``<a href>``.
    """
    found = []
    for match in _LOAD.finditer(html):
        address = next(value for value in match.groupdict().values() if value)
        if match.group("link") and _FOLLOWED.search(match.group(0)):
            continue
        if _EXTERNAL.match(address):
            found.append(address)
    return found


def on_files(files: Files, config) -> Files:
    """Add MathJax's files to the site under :data:`SITE_DIR`."""
    root = mathjax_root()
    for path in mathjax_files(root):
        uri = f"{SITE_DIR}/{path.relative_to(root).as_posix()}"
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_post_page(output: str, page, config) -> str:
    """A page without a mermaid diagram, without nbconvert's loader of mermaid (it would
    import mermaid from a CDN for a diagram; a notebook with one needs mermaid served from
    the site, and the build says so)."""
    if _MERMAID_DIAGRAM.search(output):
        return output
    return _MERMAID_LOADER.sub("", output)


def on_post_build(config) -> None:
    """Fail the build where a built page loads anything from another host."""
    site = Path(config["site_dir"])
    problems = [
        f"{page.relative_to(site)}: {address}"
        for page in sorted(site.rglob("*.html"))
        for address in external_loads(page.read_text(encoding="utf-8", errors="replace"))
    ]
    if problems:
        raise PluginError(
            "these pages load from outside the site, so they break offline; serve the file "
            "from the site (tools/mkdocs_offline.py) or drop it:\n  " + "\n  ".join(problems)
        )
