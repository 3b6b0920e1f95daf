"""Every citation of ``docs/`` resolves, and nothing points outside the repository.

The code, tests, benchmarks, deployment files and documents cite the documents by name and
place: a section number (``protocols.md 4.2``, ``§3.1``, ``section 4``, ``9, 4.4``), an id of a
table row or heading (``R7``, ``R5b``, ``D6``, ``B1``), a numbered rule (``item 8``, ``rule 1``),
a quoted heading, or an anchor of a link. This test reads them all and fails when a cited
document is missing, a cited place is not in it, a relative Markdown link of the README or of
``docs/`` leads nowhere, or a file mentions material outside the repository or a tracker
number (external projects' bugs are fine with their URL next to them).
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
THIS = Path(__file__).resolve()

SCANNED_DIRS = ("ipxbridge", "tests", "bench", "deploy", "scripts", "docs")
SCANNED_FILES = ("README.md", "pyproject.toml", "Dockerfile", ".ci/run")
TEXT_SUFFIXES = {".py", ".md", ".sh", ".yml", ".yaml", ".toml", ".service", ".json", ".lua", ".txt"}

# Continuation of a wrapped comment or docstring: the newline, indentation and comment marker
# are one space, so a citation broken over two lines is read whole.
WRAP = re.compile(r"[ \t]*\n[ \t]*(?:#+|//)?[ \t]*")
CITATION = re.compile(r"(?<![\w.-])docs/(?P<name>[A-Za-z0-9_-]+)\.md`*(?:#(?P<anchor>[\w-]*))?")
TOKEN = re.compile(
    r"""\s*,?\s*(?:and\s+)?(?:
        (?P<kw>§|sections?\b|items?\b|rules?\b)\s*
      | (?P<num>\d+(?:\.\d+)*)(?:[-\u2013](?P<num2>\d+(?:\.\d+)*))?(?![\w]|\.\d)
      | (?P<id>[A-Z]\d+[a-z]?)\b
    )""",
    re.VERBOSE,
)
QUOTED = re.compile(r'\s*,\s*"(?P<quote>[^"\n]{3,80})"')

# Material that lives outside the repository, and numbers of our own tracker.
OUTSIDE = re.compile(r"\.\./shared|shared/(?:docs|vectors|tools)\b|house-style\.md")
TRACKER = re.compile(r"\bissues?\s*#?(?P<n>\d+)", re.IGNORECASE)
# An external project's bug stays cited when its URL follows within the sentence.
EXTERNAL_URL = r"https?://github\.com/(?!ipxbridge/)[\w.-]+/[\w.-]+/(?:issues|pull)/{n}\b"
MD_LINK = re.compile(r"\[[^\]\n]*\]\((?P<target>[^)\s]+)\)")


@dataclass(frozen=True)
class Citation:
    """One citation of a document: where it is, what it names, and the places it cites."""

    source: str
    doc: str
    anchor: str | None
    places: tuple[tuple[str, str], ...]  # (kind, value): section, item, id, quote


@dataclass
class Doc:
    """What a document offers to cite: numbered headings, ids, numbered rules, anchors."""

    text: str
    sections: set[str] = field(default_factory=set)
    ids: set[str] = field(default_factory=set)
    items: set[str] = field(default_factory=set)
    anchors: set[str] = field(default_factory=set)

    def has(self, kind: str, value: str) -> bool:
        if kind == "section":
            return value in self.sections
        if kind == "item":
            return value in self.items
        if kind == "id":
            return value in self.ids
        return value.lower() in self.text.lower()  # a quoted heading or phrase


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def parse_doc(text: str) -> Doc:
    doc = Doc(text)
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            title = heading.group(1)
            doc.anchors.add(slug(title))
            number = re.match(r"§?(\d+(?:\.\d+)*)\.?(?:\s+\((\d+(?:\.\d+)*)\))?", title)
            if number:
                doc.sections.update(n for n in number.groups() if n)
            doc.ids.update(re.findall(r"\b([A-Z]\d+[a-z]?)\b", title))
        row = re.match(r"\|\s*([A-Z]\d+[a-z]?)\s*\|", line)
        if row:
            doc.ids.add(row.group(1))
        item = re.match(r"(\d+)\.\s", line)
        if item:
            doc.items.add(item.group(1))
    return doc


@cache
def load_doc(name: str) -> Doc | None:
    path = DOCS / f"{name}.md"
    return parse_doc(path.read_text(encoding="utf-8")) if path.is_file() else None


def scanned_files() -> Iterator[Path]:
    for name in SCANNED_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name
    for top in SCANNED_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if "__pycache__" in path.parts or not path.is_file() or path == THIS:
                continue  # this file plants broken citations on purpose
            if path.suffix in TEXT_SUFFIXES or path.name == "Dockerfile":
                yield path


def joined(text: str) -> str:
    return WRAP.sub(" ", text)


def citations(text: str, source: str) -> Iterator[Citation]:
    """Each citation in ``text``, with the places it names."""
    text = joined(text)
    for match in CITATION.finditer(text):
        places: list[tuple[str, str]] = []
        mode = "section"
        pos = match.end()
        while token := TOKEN.match(text, pos):
            pos = token.end()
            if token["kw"]:
                mode = "item" if token["kw"].startswith(("item", "rule")) else "section"
            elif token["num"]:
                places.extend((mode, n) for n in (token["num"], token["num2"]) if n)
            else:
                places.append(("id", token["id"]))
                mode = "section"
        quoted = QUOTED.match(text, pos)
        if quoted:
            places.append(("quote", quoted["quote"]))
        yield Citation(source, match["name"], match["anchor"] or None, tuple(places))


def citation_problems(text: str, source: str) -> list[str]:
    problems = []
    for cite in citations(text, source):
        doc = load_doc(cite.doc)
        if doc is None:
            problems.append(f"{source}: docs/{cite.doc}.md does not exist")
            continue
        if cite.anchor and cite.anchor not in doc.anchors:
            problems.append(f"{source}: docs/{cite.doc}.md has no heading #{cite.anchor}")
        for kind, value in cite.places:
            if not doc.has(kind, value):
                problems.append(f"{source}: docs/{cite.doc}.md has no {kind} {value!r}")
    return problems


def outside_problems(text: str, source: str) -> list[str]:
    problems = [
        f"{source}: points outside the repository: {m[0]!r}" for m in OUTSIDE.finditer(text)
    ]
    flat = joined(text)
    for hit in TRACKER.finditer(flat):
        url = re.compile(EXTERNAL_URL.format(n=hit["n"]))
        if not url.search(flat, hit.end(), hit.end() + 200):
            problems.append(f"{source}: a tracker number: {hit[0]!r}")
    return problems


def link_problems(path: Path, root: Path = ROOT) -> list[str]:
    """Relative Markdown links of ``path`` to missing files or headings."""
    problems = []
    text = path.read_text(encoding="utf-8")
    for match in MD_LINK.finditer(text):
        target = match["target"]
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check here
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{path.relative_to(root)}: link to missing {target}")
        elif anchor and dest.suffix == ".md" and anchor not in parse_doc(dest.read_text()).anchors:
            problems.append(f"{path.relative_to(root)}: link to missing heading {target}")
    return problems


# --- the repository -------------------------------------------------------------------------


def test_the_documents_the_code_cites_exist() -> None:
    for name in ("protocols", "reliability", "testbed", "benchmarks", "architecture"):
        assert (DOCS / f"{name}.md").is_file(), name


def test_every_citation_of_docs_resolves() -> None:
    problems: list[str] = []
    count = 0
    for path in scanned_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        count += sum(1 for _ in citations(text, ""))
        problems += citation_problems(text, str(path.relative_to(ROOT)))
    assert count > 200, f"only {count} citations found: is the scanner reading the files?"
    assert problems == []


def test_relative_links_of_the_readme_and_docs_lead_somewhere() -> None:
    problems: list[str] = []
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        problems += link_problems(path)
    assert problems == []


def test_nothing_points_outside_the_repository_or_at_tracker_numbers() -> None:
    problems: list[str] = []
    for path in scanned_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        problems += outside_problems(text, str(path.relative_to(ROOT)))
    assert problems == []


# --- the checker itself: each kind of breakage is caught --------------------------------------

BROKEN = [
    "see docs/" + "nonexistent" + ".md for more",  # built, so no scanner takes it as cited
    "(docs/protocols.md 3.42)",
    "(docs/protocols.md §77.1)",
    "docs/protocols.md section 12.9",
    "(docs/reliability.md R99)",
    "(docs/reliability.md item 42)",
    "(docs/protocols.md 9, 4.12)",
    "# wrapped (docs/reliability.md\n    # R98) here",
    "https://github.com/ipxbridge/ipxbridge/blob/main/docs/metrics.md#nosuchalert",
    '``docs/testbed.md``, "No such heading anywhere"',
]
FINE = [
    "(docs/protocols.md 4.2)",
    "(docs/protocols.md §3.1)",
    "docs/protocols.md section 3.8",
    "(docs/protocols.md 9, 4.4)",
    "(docs/protocols.md 1.4-1.8, 2.3)",
    "(docs/reliability.md items 3, 7, 8, R7, R9)",
    "(docs/reliability.md §0 item 9)",
    "(docs/reliability.md R5b, D6, L9)",
    "# wrapped (docs/reliability.md\n    # R18) here",
    "(docs/architecture.md rule 1, B1)",
    "https://github.com/ipxbridge/ipxbridge/blob/main/docs/metrics.md#ipxbridgedown",
    '``docs/testbed.md``, "Building and running the container image for real"',
]


@pytest.mark.parametrize("text", BROKEN)
def test_the_checker_catches_a_broken_citation(text: str) -> None:
    assert citation_problems(text, "planted") != []


@pytest.mark.parametrize("text", FINE)
def test_the_checker_accepts_a_good_citation(text: str) -> None:
    assert citation_problems(text, "planted") == []


def test_the_checker_catches_tracker_numbers_and_outside_paths() -> None:
    tracker = "fixed in " + "issue" + " 13 item 2"
    outside = "see ../" + "shared/docs/protocols.md"
    external = "a bug of dpkt (" + "issue" + " #681, https://github.com/kbandla/dpkt/issues/681)"
    assert outside_problems(tracker, "planted") != []
    assert outside_problems(tracker.title(), "planted") != []
    assert outside_problems(outside, "planted") != []
    assert outside_problems(external, "planted") == []


def test_the_checker_catches_a_dead_relative_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    dead = "[gone](" + "missing" + ".md)"  # built, so no scanner takes it as a real link
    page.write_text(f"# Title\n\n{dead} [here](#title) [nowhere](#no-such)\n")
    problems = link_problems(page, tmp_path)
    assert len(problems) == 2, problems
