"""Griffe extension for the API reference: Sphinx roles in docstrings read as code, and
their equations as math.

ella's docstrings name other objects the Sphinx way (``:func:`ella.fit```,
``:class:`~ella.nn.RelaxedLayer```); the Markdown renderer would print the role. This
extension turns each role into inline code (the ``~`` form keeps only the last name), each
``:math:`x``` into inline math and each ``.. math::`` block into display math, which the
site's arithmatex and MathJax typeset.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`")


MATH_ROLE = re.compile(r":math:`([^`]+)`")
MATH_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)\.\. math::[ \t]*\n(?P<body>(?:[ \t]*\n|(?P=indent)[ \t]+\S[^\n]*\n?)+)",
    re.MULTILINE,
)


def markdown_math(text: str) -> str:
    """``:math:`x``` → ``\\(x\\)``; a ``.. math::`` block → ``\\[ ... \\]`` at the
    directive's indentation (lines with ``&`` aligned, as Sphinx aligns them)."""

    def block(match: re.Match) -> str:
        indent = match.group("indent")
        lines = [line.strip() for line in match.group("body").splitlines() if line.strip()]
        body = "\n".join(lines)
        if "&" in body or "\\\\" in body:
            body = f"\\begin{{aligned}}\n{body}\n\\end{{aligned}}"
        inner = "\n".join(f"{indent}{line}" for line in body.splitlines())
        return f"{indent}\\[\n{inner}\n{indent}\\]\n\n"

    text = MATH_BLOCK.sub(block, text)
    return MATH_ROLE.sub(lambda m: f"\\({m.group(1)}\\)", text)


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
            obj.docstring.value = markdown_roles(markdown_math(obj.docstring.value))
