"""docs/provenance.md: its block runs verbatim in bash, prints the table the page shows (but
for the batches' dates), and its `--json` schema names exactly the fields `index find`
writes."""

from __future__ import annotations

import json
import re

import pytest
from helpers import REPO, run_cli, run_doc_block

DOC = (REPO / "docs" / "provenance.md").read_text(encoding="utf-8")
DATE = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def _shown_table() -> str:
    """The plain block after the ``sh`` block of "### Try it"."""
    section = DOC[DOC.index("\n### Try it\n"):]
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    return blocks[1]


def _paths(value: object, prefix: str = "") -> set[str]:
    """The dotted field names of a JSON value (``[]`` for an array's items)."""
    if isinstance(value, dict):
        out = set()
        for k, v in value.items():
            name = f"{prefix}.{k}" if prefix else k
            out |= {name} | _paths(v, name)
        return out
    if isinstance(value, list):
        return set().union(*(_paths(v, f"{prefix}[]") for v in value)) if value else set()
    return set()


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The page's block, run once in a folder holding a copy of the samples."""
    folder = tmp_path_factory.mktemp("provenance")
    run, block = run_doc_block("provenance.md", "### Try it", folder)
    return folder, run, block


def test_the_block_runs_and_prints_what_the_page_shows(ran):
    _, run, block = ran
    out = run.stdout
    shown = _shown_table()
    pattern = re.escape(shown.strip()).replace(re.escape("2026-12-06T09:38:39Z"), DATE)
    pattern = pattern.replace(re.escape("2026-12-06T09:38:45Z"), DATE)
    assert re.search(pattern, out), out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith('{"query"')]
    heading, unseen = lines
    assert [(s["package_id"], s["sample_id"]) for m in heading["matches"]
            for s in m["sources"]] == [("cpt-v1", "book-0010"), ("cpt-v2", "book-0010")]
    assert heading["matches"][0]["kind"] == "exact" and unseen["matches"] == []
    assert ("query 32a894bff25e9d4df3609b423f7069eb5c64d7a6fefddd3951eb37a2ed3b5c56 "
            "(hash, cpt, 25 normalized characters): 1 match") in out
    assert "cpt-v1 news-0014 (train)" in out.split("query 32a894")[1]
    assert "index find" in block and "--mixtures" in block


def test_the_schema_names_every_field_find_writes(ran):
    tmp_path, run, _ = ran
    written: set[str] = set()
    for line in run.stdout.splitlines():
        if line.startswith('{"query"'):
            written |= _paths(json.loads(line))
    # the table's run with --mixtures, as JSON (the block's JSON run has none)
    code, out, err = run_cli("--quiet", "--index", tmp_path / "data/provenance/cpt.sqlite",
                             "index", "find", "--json", "--workers", 1, "--package",
                             tmp_path / "samples/cpt/2026-11-26/cpt-v2", "--sample",
                             "web-0009", "--mixtures",
                             tmp_path / "data/provenance/mixtures/cpt-mix")
    assert code == 0, err
    written |= _paths(json.loads(out))
    schema = DOC[DOC.index("\n## The `--json` schema\n"):DOC.index("\n## What find cannot")]
    documented = set(re.findall(r"^\| `([^`]+)` \|", schema, re.MULTILINE))
    assert documented == written
