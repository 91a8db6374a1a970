"""Every "docs/vllm-rules.md §N" a reader meets leads somewhere.

The code, the version profiles, `--help` and printed notes justify vLLM rules by citing a section of
docs/vllm-rules.md. A reader who follows a citation must find that section in the repository, and no
citation may point at a document the repository does not ship (the rules doc's name without its
docs/ folder, or a path outside the repository).
"""
import re
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

import attnsel
from attnsel.cli.app import app

ROOT = Path(attnsel.__file__).resolve().parent
DOC = ROOT / "docs" / "vllm-rules.md"
CITED = "docs/" + "vllm-rules.md"
# A citation and the section list right after it: "§2", "§2, §3", "§3a/§3b", "§1-§8", "§5f then §5d".
CITATION = re.compile(re.escape(CITED) + r"((?:\s*(?:,|/|-|–|and|then|or)?\s*§\d+[a-z]?)+)")
SECTION = re.compile(r"§(\d+[a-z]?)")
# Citations that lead nowhere a reader of the repository can go; spelled in pieces so this file
# does not match itself.
BARE_CITATION = re.compile(r"(?<![\w/.-])" + "vllm-" + r"rules(?:\.md)?\s*§")
OUTSIDE_DOC = re.compile(r"\.\./" + "shared" + r"|/work/" + "shared" + r"|shared/reference/" + "vllm-rules"
                         r"|" + "seeds" + r"/\d{3}")


def _doc_sections() -> set[str]:
    headings = re.findall(r"^#{2,3} §(\d+[a-z]?)\s", DOC.read_text(encoding="utf-8"), flags=re.M)
    return set(headings)


def _repository_texts() -> dict[str, str]:
    texts = {}
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if path.suffix not in (".py", ".md", ".json") or not path.is_file():
            continue
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if rel.parts[:2] == ("tests", "fixtures") or path == DOC:
            continue
        texts[rel.as_posix()] = path.read_text(encoding="utf-8")
    return texts


def _cited_sections(text: str) -> list[str]:
    return [section for match in CITATION.finditer(text) for section in SECTION.findall(match.group(1))]


def _help_texts() -> dict[str, str]:
    runner = CliRunner()
    texts = {}

    def visit(command: click.Command, words: list[str]) -> None:
        result = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "400"})
        assert result.exit_code == 0, (words, result.output)
        texts[" ".join(words) or "attnsel"] = result.output
        for name, sub in getattr(command, "commands", {}).items():
            visit(sub, [*words, name])

    visit(typer.main.get_command(app), [])
    return texts


def test_the_rules_doc_keeps_the_section_numbers_the_code_cites():
    sections = _doc_sections()
    assert {str(n) for n in range(11)} <= sections
    assert {"3a", "3b", "3c", "5a", "5b", "5c", "5d", "5e", "5f", "5g"} <= sections


def test_every_citation_in_the_code_names_a_section_of_the_rules_doc():
    sections = _doc_sections()
    cited = {name: _cited_sections(text) for name, text in _repository_texts().items()}
    missing = {name: sorted(set(found) - sections) for name, found in cited.items() if set(found) - sections}
    assert not missing, f"citations of sections docs/vllm-rules.md does not have: {missing}"
    # The code justifies its rules by these citations; losing them would leave nothing to check.
    assert sum(len(found) for found in cited.values()) > 150


def test_no_citation_in_the_code_points_outside_the_repository():
    offenders = {
        name: sorted({m.group(0) for m in (*BARE_CITATION.finditer(text), *OUTSIDE_DOC.finditer(text))})
        for name, text in _repository_texts().items()
    }
    offenders = {name: found for name, found in offenders.items() if found}
    assert not offenders, f"cite docs/vllm-rules.md §N instead: {offenders}"


def test_help_cites_only_sections_the_rules_doc_has():
    sections = _doc_sections()
    helps = _help_texts()
    for command, text in helps.items():
        assert not BARE_CITATION.search(text) and not OUTSIDE_DOC.search(text), command
        assert set(_cited_sections(text)) <= sections, command
    assert any(_cited_sections(text) for text in helps.values()), "explain --help cites the rules doc"


@pytest.mark.parametrize("backend", ["ULTRAQUANT", "FLASH_ATTN_DIFFKV"])
def test_a_backend_the_release_does_not_model_is_refused_with_a_citation_a_reader_can_follow(backend):
    result = CliRunner().invoke(app, ["explain", "--gpu", "H100", "--vllm-version", "0.33.0",
                                      "--attention-backend", backend])
    assert result.exit_code == 2, result.output
    assert _cited_sections(result.output) == ["9"], result.output
    assert not BARE_CITATION.search(result.output) and not OUTSIDE_DOC.search(result.output)


# The other notes the code once cited by name alone now live in docs/ (the measuring, GPU-facts and
# architecture pages), so a bare name or the old note's title leads nowhere.
BARE_NOTE = re.compile(r"(?<![\w/.-])(?:" + "gpu-" + r"facts\.md|" + "users-and-" + r"measuring|" + "style" + r"\.md)")


def test_no_code_or_doc_cites_a_note_outside_docs():
    offenders = [f"{name}: {match.group(0)}" for name, text in _repository_texts().items()
                 for match in BARE_NOTE.finditer(text)
                 if not name.startswith("docs/") and not name.startswith("reports/examples/")]
    assert offenders == []


def test_every_cited_doc_exists():
    cited = {m.group(1) for text in _repository_texts().values() for m in re.finditer(r"docs/([\w.-]+\.md)", text)}
    missing = sorted(name for name in cited if not (ROOT / "docs" / name).is_file())
    assert cited and missing == []
