"""The README and the guide, held to what they promise.

Every ```python block of the README and of the guide's pages runs, page by page in one
namespace (so a page's later blocks may use its earlier ones), in a temporary working
directory; the README stays short, current and free of dates and commit hashes.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import io
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: the pages whose Python examples must run as written
EXAMPLE_PAGES = [README, DOCS / "index.md", *sorted((DOCS / "guide").glob("*.md"))]
#: the README is the package's PyPI description: what ella is, set-up, short examples
README_LIMIT = 12_000
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
#: seven or more hexadecimal digits with at least one letter and one digit
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")


def python_blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


#: a Python block, then one paragraph that begins "prints", then the ```text block of what
#: it prints
PRINTED = re.compile(
    r"^```python\n((?:(?!```).)*?)^```\n\n(prints[^\n]*(?:\n[^\n]+)*)\n\n^```text\n(.*?)^```",
    re.S | re.M,
)


def printed_outputs(page: Path) -> dict[str, str]:
    """The blocks of ``page`` that say what they print: block -> what it prints."""
    return {block: output for block, _, output in PRINTED.findall(page.read_text())}


def same_printout(actual: str, expected: str) -> bool:
    """Whether ``actual`` prints what ``expected`` says: the same words, and each number
    within 2 or 5% of the stated one (a training run's figures move by a few tenths
    between processors' floating-point kernels)."""
    number = r"-?\d+(?:\.\d+)?"
    a, e = re.split(f"({number})", actual.strip()), re.split(f"({number})", expected.strip())
    if len(a) != len(e):
        return False
    for x, y in zip(a, e, strict=True):
        if re.fullmatch(number, y):
            if not re.fullmatch(number, x) or abs(float(x) - float(y)) > max(
                2, 0.05 * abs(float(y))
            ):
                return False
        elif x != y:
            return False
    return True


def test_a_printout_is_compared_by_words_and_numbers_within_tolerance():
    assert same_printout("test accuracy 78.4%\nkeeps CONV", "test accuracy 77.9%\nkeeps CONV")
    assert not same_printout("test accuracy 71.0%\nkeeps CONV", "test accuracy 77.9%\nkeeps CONV")
    assert not same_printout("test accuracy 77.9%\nkeeps GCONV", "test accuracy 77.9%\nkeeps CONV")


def printout(code, namespace: dict) -> str:
    """What ``code`` prints, run in ``namespace``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, namespace)
    return out.getvalue()


def printed_once(folder: Path, block: str, run: Callable[[], str]) -> str:
    """What ``block`` printed, ``run()`` once in the session
    (:func:`tests.session_once.computed_once`): a page that repeats the README's quickstart
    reads its printout, in whichever pytest worker it runs."""
    from tests.session_once import computed_once

    digest = hashlib.sha256(block.encode()).hexdigest()[:16]
    return computed_once(folder, f"printed-{digest}", run)


def test_the_guide_has_its_pages():
    assert (DOCS / "guide").is_dir(), "docs/guide/ is missing"
    assert len(EXAMPLE_PAGES) > 5
    assert python_blocks(README), "the README has no runnable example"


@pytest.mark.parametrize(
    "page", [p for p in EXAMPLE_PAGES if p.is_file()], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_python_block_of_the_page_runs(page, tmp_path, monkeypatch, session_folder):
    blocks = python_blocks(page)
    if not blocks:
        pytest.skip(f"{page.name} has no Python example")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict = {"__name__": "__main__"}
    says = printed_outputs(page)
    for number, block in enumerate(blocks, 1):
        code = compile(block, f"{page.relative_to(ROOT)}, Python block {number}", "exec")
        if block not in says:
            exec(code, namespace)
            continue
        printed = printed_once(session_folder, block, partial(printout, code, namespace))
        assert same_printout(printed, says[block]), (
            f"{page.relative_to(ROOT)}, Python block {number} printed\n{printed}"
            f"where the page says\n{says[block]}"
        )


def test_the_readme_is_short_and_current():
    text = README.read_text()
    size = len(text.encode())
    assert size <= README_LIMIT, f"README.md is {size} bytes; move detail into docs/"
    assert not DATE.findall(text), f"README.md carries dates: {DATE.findall(text)}"
    assert not COMMIT.findall(text), f"README.md names commits: {COMMIT.findall(text)}"


def test_the_hash_pattern_finds_commits_and_spares_numbers():
    assert COMMIT.findall("at commit 43136c9, made") == ["43136c9"]
    assert not COMMIT.findall("lr 1e-3, 97.50%, seed 1234567, decade")


RESEARCH = DOCS / "research"
RECORD_LIMIT = 8 * 1024


def test_every_decision_record_is_short_and_listed_in_the_index():
    records = sorted(RESEARCH.glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert records, "docs/research/ has no decision records"
    index = (RESEARCH / "index.md").read_text()
    for record in records:
        size = len(record.read_bytes())
        assert size <= RECORD_LIMIT, f"{record.name} is {size} bytes; split or summarise it"
        assert f"({record.name})" in index, f"docs/research/index.md does not list {record.name}"
        assert record.read_text().startswith("# "), f"{record.name} has no title"


def test_the_changelog_names_the_package_version():
    import ella

    text = (ROOT / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", text, re.M)
    assert released and released[0] == ella.__version__, (
        f"CHANGELOG.md's latest release is {released[:1]}, ella.__version__ is "
        f"{ella.__version__}: bump both together"
    )
    pyproject = (ROOT / "pyproject.toml").read_text()
    # one place for the version: the package's, which the build reads
    assert 'version = { attr = "ella.__version__" }' in pyproject


def test_the_readmes_links_reach_files_that_exist():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if not t.startswith(("http://", "https://", "mailto:"))]
    assert local, "the README links to no documentation page"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_the_development_pages_layout_is_the_packages():
    """Every path docs/development.md's layout names exists, and every module and
    subpackage of ``ella`` is named there."""
    text = (DOCS / "development.md").read_text()
    layout = text[text.index("## Layout") : text.index("## Where things go")]
    named = set(re.findall(r"^(ella/[\w/]*\.py|ella/\w+/)", layout, re.M))
    named |= set(re.findall(r"\((ella/[\w/]+\.py)", layout))
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"docs/development.md names what does not exist: {missing}"
    package = ROOT / "ella"
    present = {f"ella/{p.name}" for p in package.glob("*.py") if p.name != "__init__.py"}
    present |= {f"ella/{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()}
    unnamed = sorted(present - named)
    assert not unnamed, f"docs/development.md's layout does not name {unnamed}"


#: where measurements live: the package names none of them
RESULT_PLACES = ("docs/research", "experiments/results", "benchmarks/results")


def test_the_package_does_not_quote_the_research_log():
    """Code says what and why in a line; a default's evidence is its record, linked from the
    training guide's defaults table, not from the code."""
    quoting = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "ella").rglob("*.py")
        if any(f"{place}/" in path.read_text() for place in RESULT_PLACES)
    )
    assert not quoting, f"these modules cite records or results files: {quoting}"


#: the packages whose private names (a module or name starting with ``_``) no experiment uses
PUBLIC_ONLY = ("ella", "benchmarks", "studies")


def _private(dotted: str) -> bool:
    """Whether a dotted name under :data:`PUBLIC_ONLY` has a part starting with ``_`` (not a
    dunder such as ``__version__``)."""
    parts = dotted.split(".")
    return parts[0] in PUBLIC_ONLY and any(
        p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts
    )


def private_uses(source: str) -> list[str]:
    """The private names of :data:`PUBLIC_ONLY`'s packages that ``source`` imports or
    reaches as an attribute of an imported name (``from ella.x import _y``, ``import
    ella.x._y``, ``ella.x._y``, ``from benchmarks import _common``), as ``line:
    dotted.name``."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name -> the dotted name it was imported as
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno}: {alias.name}")
                local = alias.asname or alias.name.split(".")[0]
                bound[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if _private(dotted):
                    found.append(f"{node.lineno}: {dotted}")
                bound[alias.asname or alias.name] = dotted
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, base = [], node
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                dotted = ".".join([bound[base.id], *reversed(chain)])
                if _private(dotted) and not _private(bound[base.id]):
                    found.append(f"{node.lineno}: {dotted}")
    return sorted(set(found))


def test_the_private_use_check_finds_each_form():
    assert private_uses("from ella.nn import _helper") == ["1: ella.nn._helper"]
    assert private_uses("import ella.nn._impl as impl") == ["1: ella.nn._impl"]
    assert private_uses("import ella\nella.nn._helper(1)") == ["2: ella.nn._helper"]
    assert private_uses("from ella import nn\nnn.paths._x") == ["2: ella.nn.paths._x"]
    assert private_uses("from benchmarks import _common") == ["1: benchmarks._common"]
    assert private_uses("from benchmarks._runner import write") == ["1: benchmarks._runner.write"]
    public = "import ella\nfrom ella.marglik.laplace_internals import kron_factors\n"
    public += "from experiments.full_ggn import full_ggn\nella.__version__\nself._x\n"
    assert private_uses(public) == []


def test_experiments_use_only_public_api():
    """Every file under experiments/ (scripts and their tests) and tools/ uses ``ella``'s
    public names, those of ``studies`` (what the benchmarks and the experiments share) and
    of the benchmarks' modules a tool runs (``speed_gpu``), never a module or name starting
    with ``_``."""
    files = sorted([*(ROOT / "experiments").rglob("*.py"), *(ROOT / "tools").rglob("*.py")])
    assert len(files) > 10
    private = {
        str(path.relative_to(ROOT)): uses
        for path in files
        if (uses := private_uses(path.read_text()))
    }
    assert not private, f"experiments use private names of {PUBLIC_ONLY}: {private}"


def patched_attributes(source: str) -> list[str]:
    """Where ``source`` replaces an attribute of something it imported (``setattr(X, ...)``
    or ``X.name = ...`` with ``X`` an imported name or a loop over such names): a
    monkeypatch that the import checks cannot see."""
    tree = ast.parse(source)
    imported = {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr":
            target = node.args[0]
            if not (isinstance(target, ast.Name) and target.id not in imported and not
                    isinstance(node.args[1], ast.Constant)):  # fmt: skip
                found.append(f"line {node.lineno}: setattr({ast.unparse(target)}, ...)")
        if isinstance(node, ast.Assign):
            for target in node.targets:
                owner = getattr(target, "value", None)
                if isinstance(target, ast.Attribute) and getattr(owner, "id", "") in imported:
                    found.append(f"line {node.lineno}: {ast.unparse(target)} = ...")
    return found


def test_nothing_outside_the_tests_patches_what_it_imports():
    """Outside tests/, no module replaces an attribute of a module or class it imported
    (by ``setattr`` with a name in a string, or by assignment): a study that times parts
    of ella reads the sections ella marks (:mod:`ella.runtime.timing`); ``setattr`` stays for
    replacing a model's own child modules by a name found at run time."""
    files = [
        path
        for folder in ("ella", "benchmarks", "experiments", "studies", "tools")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "tests" not in path.relative_to(ROOT).parts
    ]
    patched = {
        str(path.relative_to(ROOT)): found
        for path in files
        if (found := patched_attributes(path.read_text()))
    }
    # the one study that measured a downsampling ella does not offer (record 0027), by
    # swapping ella.nn.paths' downsampling function for its runs and restoring it
    known = {"experiments/trainability.py": 2}
    assert {k: len(v) for k, v in patched.items()} == known, f"monkeypatches: {patched}"
    assert patched_attributes("import m\nsetattr(m, 'f', g)\n") == ["line 2: setattr(m, ...)"]
    assert patched_attributes("from m import C\nC.f = g\n") == ["line 2: C.f = ..."]
    assert patched_attributes("for name, child in x:\n    setattr(model, name, y)\n") == []


def test_the_per_layer_reliability_is_the_one_its_results_give():
    """The guide's per-layer table and the sentence ``ella report`` says beside every
    per-layer answer are what ``python -m experiments.layer_reduction --phase summarise``
    writes from the committed results (record 0042)."""
    import json

    from ella.selection import PER_LAYER_RELIABILITY
    from experiments.layer_reduction_summary import BEGIN, END, GUIDE, reliability_table
    from studies.results import splice_between

    payload = json.loads((ROOT / "experiments/results/layer_reduction.json").read_text())
    text = GUIDE.read_text()
    assert splice_between(text, BEGIN, END, reliability_table(payload)) == text
    assert payload["claims"]["per_layer_reliability"] == PER_LAYER_RELIABILITY


def test_the_default_criterion_and_the_evidence_note_are_what_record_0044_found():
    """The sentence beside every answer of the evidence, and the default criterion of a run
    with held-out images, are what ``python -m experiments.criteria`` writes from the
    committed results: no criterion of the training images passed both decisions, so the
    held-out likelihood decides where the run holds images out."""
    import json

    from ella.selection import (
        DEFAULT_CRITERION,
        EVIDENCE_AGREEMENT,
        HELD_OUT_CRITERION,
        default_criterion,
    )

    claims = json.loads((ROOT / "experiments/results/criteria.json").read_text())["claims"]
    assert claims["evidence_agreement"] == EVIDENCE_AGREEMENT
    passes = claims["a training-only criterion passes both decisions"]
    assert not passes, "record 0044's branch: make that criterion the default"
    assert (
        default_criterion(200) == HELD_OUT_CRITERION and default_criterion(0) == DEFAULT_CRITERION
    )


#: a results file named in prose: ``experiments/results/...`` or ``benchmarks/results/...``,
#: optionally as it was at a commit (``git show SHA:path``)
RESULTS_REFERENCE = re.compile(
    r"(?:git show (?P<commit>[0-9a-f]{7,40}\^?):)?"
    r"(?P<path>(?:experiments|benchmarks)/results/[A-Za-z0-9_./{},*-]*[A-Za-z0-9_/}*])"
)
#: the pages that name results files: the README, the documentation and the folders' READMEs
#: (not the changelog, whose lines are history: docs/changelog.md links CHANGELOG.md)
PAGES = [README, *sorted(p for p in DOCS.rglob("*.md") if not p.is_symlink()),
         *sorted(ROOT.glob("*/README.md"))]  # fmt: skip


def _expanded(path: str) -> list[str]:
    """``a.{json,md}`` -> ``["a.json", "a.md"]``."""
    found = re.search(r"\{([^}]*)\}", path)
    if not found:
        return [path]
    return [
        p
        for part in found.group(1).split(",")
        for p in _expanded(path[: found.start()] + part + path[found.end() :])
    ]


def missing_results(text: str) -> list[str]:
    """The results files ``text`` names that are neither in the tree (a glob must match) nor,
    where it names a commit, in that commit; placeholders (``NAME``, ``DIR``) aside."""
    import subprocess

    missing = []
    for found in RESULTS_REFERENCE.finditer(text):
        for path in _expanded(found["path"]):
            if re.search(r"\b[A-Z]{3,}\b", path):  # NAME.json, DIR: a placeholder
                continue
            if found["commit"]:

                def known(obj: str) -> bool:
                    done = subprocess.run(["git", "cat-file", "-e", obj], cwd=ROOT,
                                          capture_output=True)  # fmt: skip
                    return done.returncode == 0

                # a clone without that history (shallow) cannot tell: not counted missing
                exists = known(f"{found['commit']}:{path}") or not known(found["commit"])
            else:
                exists = any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
            if not exists:
                missing.append(path)
    return missing


def test_the_results_reference_pattern_expands_and_spares_placeholders():
    assert _expanded("b/results/x.{json,md}") == ["b/results/x.json", "b/results/x.md"]
    assert missing_results("see `benchmarks/results/NAME.json` and experiments/results/.") == []
    assert missing_results("(`experiments/results/no_such_file.md`).") == [
        "experiments/results/no_such_file.md"
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_results_file_a_page_names_exists(page):
    missing = missing_results(page.read_text())
    assert not missing, f"{page.relative_to(ROOT)} names results files that do not exist: {missing}"


# ---------------------------------------------------------------- the API reference
API = DOCS / "api"
#: the packages whose ``__all__`` is public API
PACKAGES = ["ella", *sorted(f"ella.{p.parent.name}" for p in (ROOT / "ella").glob("*/__init__.py"))]


def _api_entries() -> set[str]:
    """The objects the API pages document (``::: dotted.path``)."""
    return {
        name
        for page in API.glob("*.md")
        for name in re.findall(r"^::: ([\w.]+)", page.read_text(), re.M)
    }


def _names_of(package: str, name: str) -> set[str]:
    """The dotted paths under which ``package.name`` may be documented: where it is defined
    (its module, or a module of the package that holds the same object), any public package
    that exports it, and those modules as a whole."""
    import importlib
    import inspect
    import pkgutil

    obj = getattr(importlib.import_module(package), name)
    homes = {package}
    if inspect.isclass(obj) or inspect.isfunction(obj):
        homes.add(obj.__module__)
    else:  # a constant: the modules of the package that define it
        path = getattr(importlib.import_module(package), "__path__", [])
        for info in pkgutil.iter_modules(path, f"{package}."):
            if not info.name.endswith("__main__"):
                module = importlib.import_module(info.name)
                if getattr(module, name, None) is obj:
                    homes.add(info.name)
    homes |= {p for p in PACKAGES if getattr(importlib.import_module(p), name, None) is obj}
    return {f"{home}.{name}" for home in homes} | homes


def test_every_public_name_has_an_entry_in_the_api_reference():
    import importlib

    entries = _api_entries()
    missing = [
        f"{package}.{name}"
        for package in PACKAGES
        for name in getattr(importlib.import_module(package), "__all__", [])
        if not _names_of(package, name) & entries
    ]
    assert not missing, f"no entry in docs/api/ for {missing}: add a '::: path' line"


def test_the_configuration_field_tables_are_the_classes():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "config_tables", ROOT / "tools" / "config_tables.py"
    )
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    assert tables.main(["--check"]) == 0, "run python tools/config_tables.py"
    for page, classes in tables.TABLES.items():
        text = (ROOT / page).read_text()
        for cls, _ in classes:
            for field in (f.name for f in dataclasses.fields(cls)):
                assert f"| `{field}` |" in text, f"{page} has no row for {cls.__name__}.{field}"


def test_docstring_equations_reach_the_reference_as_math():
    """The API reference's griffe extension turns ``:math:`` roles and ``.. math::`` blocks
    into the delimiters arithmatex typesets; every equation of a docstring that states one
    as a block (the package's) converts, none left as a directive."""
    import importlib.util

    import ella.marglik.kron_terms

    spec = importlib.util.spec_from_file_location("roles", ROOT / "tools" / "griffe_roles.py")
    roles = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roles)
    text = "Sum :math:`a_i` of\n\n.. math::\n\n    x &= 1, \\\\\n    y &= 2\n\nafter."
    assert roles.markdown_math(text) == (
        "Sum \\(a_i\\) of\n\n\\[\n\\begin{aligned}\nx &= 1, \\\\\ny &= 2\n\\end{aligned}\n\\]"
        "\n\nafter."
    )
    for path in sorted((ROOT / "ella").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Module):
                doc = ast.get_docstring(node)
                if doc and ".. math::" in doc:
                    converted = roles.markdown_math(doc)
                    assert ".. math::" not in converted and ":math:" not in converted, path
    terms = ella.marglik.kron_terms.KronEvidenceTerms.__doc__
    assert "\\begin{aligned}" in roles.markdown_math(terms)
