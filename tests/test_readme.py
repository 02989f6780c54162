"""The README's promises to a new user: its "Command line" block runs verbatim in bash on a
copy of the project, and every decision reason is explained."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import REPO, run_cli

from near_dedup_core.report import REASONS

README = (REPO / "README.md").read_text(encoding="utf-8")


def fenced_block(heading: str) -> str:
    """The first ``` block after the markdown heading ``heading``."""
    text = "\n" + README
    section = text[text.index(f"\n{heading}\n"):]
    match = re.search(r"^```[^\n]*\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    assert match, heading
    return match.group(1)


def commands(block: str) -> list[str]:
    """Shell commands of a block, backslash continuations joined."""
    return [c.strip() for c in re.sub(r"\\\n", " ", block).splitlines() if c.strip()]


def project_copy(tmp: Path) -> Path:
    """What a fresh clone has that the block reads (samples, examples, config), and a
    ``.venv`` with the ``near-dedup`` this test runs under."""
    root = tmp / "clone"
    for folder in ("samples", "examples", "config"):
        shutil.copytree(REPO / folder, root / folder)
    bin_dir = Path(sys.executable).parent
    if (bin_dir / "activate").is_file() and (bin_dir / "near-dedup").is_file():
        (root / ".venv").symlink_to(bin_dir.parent, target_is_directory=True)
    else:  # not run from a venv with the project installed: the same command, by module
        venv_bin = root / ".venv" / "bin"
        venv_bin.mkdir(parents=True)
        shim = venv_bin / "near-dedup"
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m near_dedup_core "$@"\n',
                        encoding="utf-8")
        shim.chmod(0o755)
        (venv_bin / "activate").write_text(f'PATH="{venv_bin}:$PATH"\n', encoding="utf-8")
    return root


def test_readme_starts_with_make_demo_and_make_test():
    assert README.split("\n## ")[0].count("```") == 2  # the only commands before "What it does"
    assert commands(fenced_block("# near-dedup")) == ["make demo", "make test"]


def test_command_line_block_runs_verbatim_in_bash(tmp_path):
    lines = commands(fenced_block("## Command line"))
    assert lines[0] == "source .venv/bin/activate"
    assert not any(re.search(r"\[|\]|<|>|…", line) for line in lines), "placeholders"
    root = project_copy(tmp_path)
    script = ["set -u"]
    for i, line in enumerate(lines):
        quoted = line.replace('"', "")
        check = f'rc=$?; [ $rc -eq 0 ] || {{ echo "line {i + 1} exited $rc: {quoted}" >&2; exit 1; }}'
        script += [line, check]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    run = subprocess.run(["bash", "-c", "\n".join(script)], cwd=root, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "report data/example/reports/near-cpt-v2: OK" in out
    assert "created cpt-v4 at data/example/snapshots/cpt-v4 (8 records)" in out
    assert "mixture data/example/mixtures/cpt-mix-example OK" in out
    assert "query cpt-v2/web-0009 (sample, cpt, 464 normalized characters): 3 matches" in out
    assert "cpt-v1 web-0021 (train), batch 1 of " in out and "in mixtures: none" in out
    assert (root / "data" / "example" / "plan.json").is_file()
    assert (root / "data" / "example" / "site" / "near-cpt-v2" / "index.html").is_file()


def test_the_release_template_given_to_the_cli_says_what_it_is():
    code, out, err = run_cli("mixture", "plan", REPO / "config" / "mixture-template.json")
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert "a daily-release template (NEAR_DEDUP_MIXTURE_TEMPLATE)" in err
    assert "config/mixture-example.json" in err


def test_readme_explains_every_decision_reason_and_links_only_what_a_clone_has():
    table = README[README.index("| reason | decision | meaning |"):]
    for reason, (decision, _) in REASONS.items():
        assert f"| `{reason}` | {decision} |" in table, reason
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        assert (REPO / target).exists(), target
    assert "../shared" not in README


def test_readme_figures_are_computed_or_absent():
    """The candidate probabilities the config table gives follow from its banding; the README
    keeps no test counts or timings that nothing checks."""
    from near_dedup_core.config import NearDedupConfig

    config = NearDedupConfig()
    row = next(line for line in README.splitlines() if line.startswith("| `num_perm`"))

    def p(j: float) -> float:
        return 1 - (1 - j ** config.rows) ** config.bands

    assert f"{p(0.9):.5f} at J=0.9" in row and f"{p(0.8):.3f} at 0.8" in row
    assert not re.search(r"\d[\d,]* tests\b", README)
    assert not re.search(r"\b(about|in) \d+ (minutes|seconds)\b", README)
