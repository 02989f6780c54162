"""Real text installed on this Debian machine, none of it written by this project.

Four families (the record's ``domain``): ``man`` (man pages, troff stripped), ``copyright``
(Debian package copyright files), ``docstring`` (CPython standard-library docstrings, one
document per module and per class) and ``pkgmeta`` (LICENSE and METADATA files of installed
Python distributions). Each collector yields ``(text, source)`` in a sorted, deterministic order.
"""

from __future__ import annotations

import ast
import gzip
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from bench.troff import troff_to_text

Doc = tuple[str, dict]

MAN_ROOT = Path("/usr/share/man")
DOC_ROOT = Path("/usr/share/doc")


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def man_pages(root: Path = MAN_ROOT) -> Iterator[Doc]:
    """Every compressed man page below ``root`` (all sections and languages), as plain text.
    ``.so`` redirect stubs and symlinks to other pages are skipped."""
    for path in sorted(root.rglob("*.gz")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            source = _decode(gzip.decompress(path.read_bytes()))
        except (OSError, EOFError):
            continue
        if source.lstrip().startswith(".so "):
            continue
        rel = path.relative_to(root)
        lang = rel.parts[0] if not rel.parts[0].startswith("man") else "en"
        yield troff_to_text(source), {"path": str(path), "lang": lang}


def copyright_files(root: Path = DOC_ROOT) -> Iterator[Doc]:
    """``/usr/share/doc/<package>/copyright`` of every installed Debian package."""
    for path in sorted(root.glob("*/copyright")):
        if path.is_file():
            yield _decode(path.read_bytes()), {"path": str(path), "package": path.parent.name}


def stdlib_root() -> Path:
    """The standard library of the running interpreter (CPython 3.11 on this machine)."""
    return Path(sysconfig.get_paths()["stdlib"])


def _joined_docstrings(node: ast.Module | ast.ClassDef) -> str:
    """The node's docstring and those of its direct functions, as ``name: doc`` paragraphs."""
    parts = [ast.get_docstring(node, clean=True) or ""]
    for sub in node.body:
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(sub, clean=True)
            if doc:
                parts.append(f"{sub.name}: {doc}")
    return "\n\n".join(p for p in parts if p)


def _docstring_docs(tree: ast.Module) -> Iterator[tuple[str, str]]:
    """(qualname, text) per module (module + top-level function docstrings) and per class
    (class + method docstrings): the unit a reader of ``help()`` sees."""
    yield "", _joined_docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            yield node.name, _joined_docstrings(node)


def stdlib_docstrings(root: Path | None = None) -> Iterator[Doc]:
    """Docstrings of the standard library (site-packages excluded)."""
    root = root or stdlib_root()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "site-packages":
            continue
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError):
            continue
        for qualname, text in _docstring_docs(tree):
            yield text, {"path": str(path), "qualname": qualname,
                         "python": ".".join(map(str, sys.version_info[:3]))}


def site_packages_roots() -> list[Path]:
    """site-packages of the running environment and of its base interpreter."""
    roots = {Path(sysconfig.get_paths()["purelib"]),
             Path(sysconfig.get_paths(vars={"base": sys.base_prefix,
                                            "platbase": sys.base_prefix})["purelib"])}
    return sorted(r for r in roots if r.is_dir())


#: Distributions written by this project: never part of the corpus.
OWN_DISTRIBUTIONS = ("near_dedup-", "near-dedup-")


def package_metadata(roots: list[Path] | None = None) -> Iterator[Doc]:
    """METADATA and LICENSE/COPYING/NOTICE files of installed Python distributions (this
    project's own distribution excluded)."""
    for root in roots or site_packages_roots():
        for info in sorted(root.glob("*.dist-info")):
            if info.name.startswith(OWN_DISTRIBUTIONS):
                continue
            for path in sorted(info.rglob("*")):
                name = path.name.upper()
                if path.is_file() and (name == "METADATA" or name.startswith(
                        ("LICENSE", "LICENCE", "COPYING", "NOTICE", "AUTHORS"))):
                    yield _decode(path.read_bytes()), {"path": str(path),
                                                       "distribution": info.name}


FAMILIES = {
    "man": man_pages,
    "copyright": copyright_files,
    "docstring": stdlib_docstrings,
    "pkgmeta": package_metadata,
}
