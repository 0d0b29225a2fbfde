"""What a fresh machine installs and builds: the lock, the package, the strict docs gate.

- ``constraints.txt`` is the whole environment: every installed distribution is pinned
  there at the installed version, and pyproject.toml's ranges admit every pin;
- a wheel built from the checkout carries the package, its data, its licence and the
  ``ella`` command, and works as a library from where it is installed;
- the docs gate (``tools/docs.sh``, run by ``.ci/run``) is ``mkdocs build --strict`` with
  every warning counted, and that build fails on a docstring griffe cannot read.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import ella

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "constraints.txt"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: installed beside the lock by the interpreter's venv module, or the project itself
NOT_LOCKED = {"pip", "setuptools", "wheel", "ella-torch"}


def locked() -> dict[str, Version]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def requirements() -> list[Requirement]:
    extras = PYPROJECT["optional-dependencies"]
    named = [*PYPROJECT["dependencies"], *extras["dev"], *extras["docs"], *extras["ray"]]
    return [Requirement(r) for r in named]


def test_the_lock_pins_each_package_once_and_no_cuda_or_torchvision():
    lines = [ln for ln in LOCK.read_text().splitlines() if ln and not ln.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][^\s]*", ln) for ln in lines), lines
    names = [canonicalize_name(ln.split("==")[0]) for ln in lines]
    assert len(names) == len(set(names)), "a package is pinned twice"
    assert not [n for n in names if n.startswith("nvidia-") or n == "torchvision"]
    assert not [ln for ln in lines if "+" in ln], "a local build label (+cpu) in the lock"


def test_pyprojects_ranges_admit_every_pin_of_the_lock():
    pins = locked()
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is declared in pyproject.toml but not locked"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject.toml's {req}"
        )


def test_the_environment_is_the_lock():
    """Every installed distribution is the locked version (torch's local label aside)."""
    pins = locked()
    site = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    for dist in md.distributions(path=sorted(site)):  # not setuptools' vendored copies
        name = canonicalize_name(dist.metadata["Name"])
        if name in NOT_LOCKED:
            continue
        assert name in pins, f"{name} is installed but not in constraints.txt"
        installed = Version(Version(dist.version).public)
        assert installed == pins[name], f"{name} {dist.version} installed, {pins[name]} locked"


def test_the_citation_and_licence_name_this_version():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["version"] == ella.__version__
    assert citation["license"] == PYPROJECT["license"] == "MIT"
    assert "MIT License" in (ROOT / "LICENSE").read_text()


@pytest.mark.slow
def test_a_wheel_of_the_checkout_works_as_a_library(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "ella", source / "ella", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(source)],
        check=True,
    )
    (wheel,) = tmp_path.glob("ella_torch-*.whl")
    assert wheel.name.startswith(f"ella_torch-{ella.__version__}-py3-none-any")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(info).decode()
        entry_points = archive.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert [n for n in names if n.startswith("ella/data/") and n.endswith(".npz")]
    assert [n for n in names if n.endswith("licenses/LICENSE")]
    assert "ella = ella.cli:main" in entry_points
    for requirement in PYPROJECT["dependencies"]:
        assert f"Requires-Dist: {Requirement(requirement)}" in metadata

    target = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    probe = (
        "import ella, ella.data; "
        "print(ella.__file__); print(len(ella.data.load_dataset('mnist_subset').train))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert Path(out[0]).is_relative_to(target), out
    assert int(out[1]) > 0


# ------------------------------------------------------------------------ the docs gate
def test_ci_builds_the_docs_strictly_without_silencing_warnings():
    assert "tools/docs.sh" in (ROOT / ".ci" / "run").read_text()
    (build,) = [
        ln
        for ln in (ROOT / "tools" / "docs.sh").read_text().splitlines()
        if re.search(r"mkdocs\"? build", ln)
    ]
    flags = build.split()
    assert "--strict" in flags
    assert not {"-q", "--quiet"} & set(flags), "--quiet drops warnings before --strict counts"


BAD = '''
def split(train_loader: object = None, test_loader: object = None) -> None:
    """Two loaders.

    Args:
        train_loader, test_loader: grouped, which griffe reads as one unknown parameter.
    """
'''
GOOD = '''
def split(train_loader: object = None, test_loader: object = None) -> None:
    """Two loaders.

    Args:
        train_loader: the training loader.
        test_loader: the test loader.
    """
'''


def strict_build(tmp_path: Path, module: str) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of a one-page site documenting ``module`` with the API
    reference's own mkdocstrings options."""
    ours = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    (plugin,) = [p for p in ours["plugins"] if isinstance(p, dict) and "mkdocstrings" in p]
    options = plugin["mkdocstrings"]["handlers"]["python"]["options"]
    options["extensions"] = [str(ROOT / e) for e in options.get("extensions", [])]
    site = tmp_path / "site"
    (site / "docs").mkdir(parents=True)
    (site / "docs" / "index.md").write_text("# API\n\n::: loaders.split\n")
    (site / "loaders.py").write_text(module)
    config = {
        "site_name": "gate",
        "strict": True,
        "plugins": [
            {"mkdocstrings": {"handlers": {"python": {"paths": ["."], "options": options}}}}
        ],
    }
    (site / "mkdocs.yml").write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "out")],
        cwd=site,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


def test_the_strict_build_fails_on_a_docstring_griffe_cannot_read(tmp_path):
    bad = strict_build(tmp_path / "bad", BAD)
    assert bad.returncode != 0, bad.stderr
    assert "train_loader, test_loader" in bad.stderr, bad.stderr
    good = strict_build(tmp_path / "good", GOOD)
    assert good.returncode == 0, good.stderr


def test_the_docs_build_uses_the_environment_the_setup_builds():
    """``ELLA_VENV`` names the environment for both scripts (``.venv`` without it)."""
    docs = (ROOT / "tools" / "docs.sh").read_text()
    setup = (ROOT / "tools" / "setup_env.sh").read_text()
    assert "venv=${ELLA_VENV:-.venv}" in docs and "venv=${ELLA_VENV:-.venv}" in setup
    assert ".venv/bin" not in docs


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("j", "'j'"),  # a line cut in the middle
        ("numpy==2.", "'numpy==2.'"),
        ("\x00\x9f\xffgarbage", "'???garbage'"),
        ("numpy>=2.0", "'numpy>=2.0'"),
    ],
)
def test_setup_refuses_a_bad_lock_line_by_number_before_installing(tmp_path, line, shown):
    """A garbled constraints.txt is refused with its file and line, exit 1, before the
    environment is created or its stamp written."""
    (tmp_path / "tools").mkdir()
    for name in ("setup_env.sh", "check_lock.py"):
        shutil.copy(ROOT / "tools" / name, tmp_path / "tools" / name)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    lock = (ROOT / "constraints.txt").read_bytes().split(b"\n")
    lock.insert(3, line.encode("latin-1"))
    (tmp_path / "constraints.txt").write_bytes(b"\n".join(lock))
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["bash", str(tmp_path / "tools" / "setup_env.sh")],
        env={"ELLA_VENV": str(venv), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        errors="replace",
    )
    assert done.returncode == 1
    assert f"constraints.txt line 4 is not name==version: {shown}" in done.stderr
    assert not venv.exists()


# ----------------------------------------------------------------- the lock is whole
def lock_checker():
    spec = importlib.util.spec_from_file_location("check_lock", ROOT / "tools" / "check_lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECK = lock_checker()
REQUIRED = CHECK.required_names(ROOT / "pyproject.toml")


def refusal(text: str) -> list[str]:
    return CHECK.problems(text, REQUIRED)


def test_the_committed_lock_is_whole_and_ends_with_its_trailer():
    text = LOCK.read_text()
    assert refusal(text) == []
    pins = CHECK.pin_lines(text.splitlines())
    assert text.splitlines()[-1] == CHECK.trailer(pins)
    assert {"torch", "numpy", "laplace-torch", "asdfghjkl", "pytest", "mkdocs"} <= set(REQUIRED)
    assert CHECK.main([str(LOCK)]) == 0


def test_the_required_pins_are_read_the_same_without_tomllib(monkeypatch):
    """Python 3.10 has no tomllib: the checker reads pyproject.toml's arrays itself."""
    monkeypatch.setitem(sys.modules, "tomllib", None)
    assert CHECK.required_names(ROOT / "pyproject.toml") == REQUIRED


def test_a_lock_of_comments_only_is_refused():
    comments = "".join(ln + "\n" for ln in LOCK.read_text().splitlines() if ln.startswith("#"))
    assert "it pins nothing (comments only)" in refusal(comments)
    assert refusal("") != []


def test_a_lock_cut_at_any_line_end_or_after_a_line_that_still_looks_whole_is_refused():
    """Cut after each of its lines (``numpy==2`` of ``numpy==2.4.6`` among them): the
    trailer is gone, whatever the last line looks like."""
    text = LOCK.read_text()
    lines = text.splitlines(keepends=True)
    for n in range(len(lines)):
        assert refusal("".join(lines[:n])), f"cut after line {n} passes"
    cut = text[: text.index("numpy==2.4.6") + len("numpy==2")]
    assert any("cut" in p for p in refusal(cut)), refusal(cut)


def test_a_lock_with_a_pin_removed_or_edited_is_refused_by_its_trailer():
    text = LOCK.read_text()
    torch_pin = next(ln for ln in text.splitlines() if ln.startswith("torch=="))
    without_torch = text.replace(torch_pin + "\n", "")
    found = refusal(without_torch)
    assert "it pins no torch (pyproject.toml requires it)" in found, found
    assert any("pins where its trailer says" in p for p in found), found
    requests = next(ln for ln in text.splitlines() if ln.startswith("requests=="))
    edited = text.replace(requests, "requests==2.3")
    assert refusal(edited) == ["its pins are not the ones its trailer's checksum was written for"]
    assert refusal(text + "extra==1.0\n")  # a pin after the trailer


def test_writing_the_trailer_makes_a_regenerated_lock_whole(tmp_path):
    lock = tmp_path / "constraints.txt"
    body = [ln for ln in LOCK.read_text().splitlines() if not ln.startswith("# lock: ")]
    lock.write_text("\n".join(body) + "\n\n")
    assert refusal(lock.read_text())
    CHECK.main(["--write", str(lock)])
    CHECK.main(["--write", str(lock)])  # again: one trailer, the same file
    assert lock.read_text() == LOCK.read_text()


def test_pip_reads_the_trailer_as_a_comment():
    lines = LOCK.read_text().splitlines()
    assert lines[-1].startswith("# ") and not lines[-1].startswith("#!")


@pytest.mark.parametrize("cut", ["comments", "numpy==2", "no torch"])
def test_setup_refuses_a_cut_lock_before_installing(tmp_path, cut):
    """tools/setup_env.sh stops with one line naming the fix, exit 1, before the
    environment is created or its stamp written."""
    (tmp_path / "tools").mkdir()
    for name in ("setup_env.sh", "check_lock.py"):
        shutil.copy(ROOT / "tools" / name, tmp_path / "tools" / name)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    text = LOCK.read_text()
    if cut == "comments":
        text = "".join(ln + "\n" for ln in text.splitlines() if ln.startswith("#"))[:-1]
    elif cut == "numpy==2":
        text = text[: text.index("numpy==2.4.6") + len("numpy==2")] + "\n"
    else:
        text = "".join(ln + "\n" for ln in text.splitlines() if not ln.startswith("torch=="))
    (tmp_path / "constraints.txt").write_text(text)
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["bash", str(tmp_path / "tools" / "setup_env.sh")],
        env={"ELLA_VENV": str(venv), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("[setup] constraints.txt is not the whole lock: "), line
    assert "git checkout constraints.txt" in line and "bash tools/lock.sh" in line
    assert not venv.exists()


# ----------------------------------------------------------- the site works offline
def offline_hook():
    path = ROOT / "tools" / "mkdocs_offline.py"
    spec = importlib.util.spec_from_file_location("mkdocs_offline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OFFLINE = offline_hook()


@pytest.mark.parametrize(
    ("html", "found"),
    [
        (
            '<script src="https://cdn.example/mathjax.js"></script>',
            "https://cdn.example/mathjax.js",
        ),
        ("<script defer src=//cdn.example/a.js></script>", "//cdn.example/a.js"),
        (
            '<link rel="stylesheet" href="https://fonts.googleapis.com/css?f=Roboto">',
            "https://fonts.googleapis.com/css?f=Roboto",
        ),
        (
            '<link rel="preconnect" href="https://fonts.gstatic.com" crossorigin>',
            "https://fonts.gstatic.com",
        ),
        (
            '<script type="module">import mermaid from "https://cdnjs.example/m.mjs";</script>',
            "https://cdnjs.example/m.mjs",
        ),
        (
            "<script>const m = await import('http://cdn.example/x.js')</script>",
            "http://cdn.example/x.js",
        ),
        (
            "<style>@import url('https://fonts.example/f.css');</style>",
            "https://fonts.example/f.css",
        ),
    ],
)
def test_a_load_from_another_host_is_found(html, found):
    assert OFFLINE.external_loads(f"<html><head>{html}</head></html>") == [found]


def test_what_the_site_serves_itself_and_links_the_reader_follows_are_not_loads():
    html = (
        '<script src="../javascripts/mathjax/tex-mml-chtml.js"></script>'
        '<link rel="stylesheet" href="assets/stylesheets/main.css">'
        '<link rel="canonical" href="https://ella.example/guide/">'
        '<a href="https://github.com/aleximmer/Laplace">laplace-torch</a>'
        "<pre>from ella import fit</pre>"
    )
    assert OFFLINE.external_loads(html) == []


def site_like_ours(tmp_path: Path, page: str) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of a one-page site with mkdocs.yml's theme, hooks,
    mathematics and scripts."""
    ours = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    site = tmp_path / "site"
    (site / "docs" / "javascripts").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "javascripts" / "mathjax.js", site / "docs" / "javascripts")
    (site / "docs" / "index.md").write_text(page)
    config = {key: ours[key] for key in ("theme", "markdown_extensions", "extra_javascript")}
    config |= {
        "site_name": "offline",
        "strict": True,
        "hooks": [str(ROOT / "tools" / "mkdocs_offline.py")],
        "plugins": ["search"],
    }
    (site / "mkdocs.yml").write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "out")],
        cwd=site,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


def test_the_site_serves_its_own_mathjax_and_loads_nothing_from_outside(tmp_path):
    built = site_like_ours(tmp_path, "# Maths\n\nThe group's order \\(\\lvert G\\rvert\\).\n")
    assert built.returncode == 0, built.stderr
    out = tmp_path / "out"
    page = (out / "index.html").read_text()
    assert "arithmatex" in page
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', page)
    assert "javascripts/mathjax/tex-mml-chtml.js" in scripts, scripts
    assert (out / OFFLINE.SCRIPT).is_file()
    fonts = list((out / OFFLINE.SITE_DIR / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert len(fonts) > 10  # the CHTML output's TeX fonts, which it loads on demand
    assert (out / OFFLINE.SITE_DIR / "input" / "tex" / "extensions" / "ams.js").is_file()
    for html in out.rglob("*.html"):
        assert OFFLINE.external_loads(html.read_text()) == [], html


def test_a_page_that_loads_from_another_host_fails_the_build_by_name(tmp_path):
    page = '# Page\n\n<script src="https://cdn.example/widget.js"></script>\n'
    built = site_like_ours(tmp_path, page)
    assert built.returncode != 0
    assert "index.html: https://cdn.example/widget.js" in built.stderr, built.stderr


LOADER = '<script type="module">\n  const m = await import("https://cdn.example/mermaid.mjs");\n</script>'


def test_a_page_without_a_diagram_loses_nbconverts_mermaid_loader():
    page = f"<head>{LOADER}</head><body><p>a notebook</p></body>"
    assert OFFLINE.on_post_page(page, None, None) == "<head></head><body><p>a notebook</p></body>"
    with_diagram = f'<head>{LOADER}</head><body><div class="jp-Mermaid"><pre>a</pre></div></body>'
    assert OFFLINE.on_post_page(with_diagram, None, None) == with_diagram  # the build says so
    assert OFFLINE.external_loads(with_diagram) == ["https://cdn.example/mermaid.mjs"]
