"""Griffe extension for the API reference: Sphinx roles in docstrings read as code.

ella's docstrings name other objects the Sphinx way (``:func:`ella.fit```,
``:class:`~ella.nn.RelaxedLayer```); the Markdown renderer would print the role. This
extension turns each role into inline code (the ``~`` form keeps only the last name).
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`")


def markdown_roles(text: str) -> str:
    """``:role:`~a.b.c``` → ```c```, ``:role:`a.b``` → ```a.b```."""

    def code(match: re.Match) -> str:
        name = match.group(1)
        if match.group(0).split("`", 1)[1].startswith("~"):
            name = name.rsplit(".", 1)[-1]
        return f"`{name}`"

    return ROLE.sub(code, text)


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite each object's docstring before it is parsed."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_roles(obj.docstring.value)
