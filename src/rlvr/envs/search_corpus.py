"""A seeded encyclopedia of fictional towns, people and companies, with questions only it answers.

The search environment needs facts no pretrained model can know, so they are invented here from a
seed: the same ``(seed, size)`` always gives the same documents and questions, and nothing is
downloaded or shipped. Every entity gets one short document (2–3 sentences); every question asks
one attribute of one entity (single-hop), or an attribute of a company's founder (two-hop: find
the founder in the company's document, then the founder's own document).

Retrieval has to rank, not merely match: first names and surnames are drawn from small pools, so
"Mira Kalden" shares a word with every other Mira and every other Kalden; some companies carry a
surname ("Kalden Works"); a company's document names its founder next to a year and a town that
are not the founder's birth year or town. The generator keeps one property the tests check: among
the documents that name a question's subject, only the gold document contains the answer.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "st", "t")
_ONSETS += ("th", "tr", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou")
_CODAS = ("", "", "", "n", "r", "l", "s", "k", "m", "th", "nd", "sk")

# Disjoint vocabularies: no value of one attribute can be mistaken for another's.
PROFESSIONS = (
    "botanist", "clockmaker", "cartographer", "violinist", "surveyor", "glassblower", "astronomer",
    "bookbinder", "engineer", "painter", "chemist", "architect", "sculptor", "tailor", "physician",
    "poet",
)  # fmt: skip
TRADES = ("salt", "wool", "glass", "cheese", "amber", "timber", "copper", "lace", "honey", "slate")
PRODUCTS = (
    "clocks", "bicycles", "pianos", "lamps", "typewriters", "umbrellas", "compasses", "kettles",
    "telescopes", "barometers",
)  # fmt: skip
COMPANY_SUFFIXES = ("Works", "Mills", "Foundry", "Press", "Traders", "Company")

TOWN_YEARS = (1100, 1799)  # towns are founded long before anyone in the corpus is born
BIRTH_YEARS = (1820, 1960)
FOUNDING_AGE = (20, 55)  # a company is founded this many years after its founder's birth

# Names used by the prompt's worked demonstration; never given to a corpus entity.
RESERVED_NAMES = frozenset({"Dovan", "Reth", "Hollem"})


@dataclass(frozen=True)
class Document:
    id: int
    title: str
    text: str

    @property
    def contents(self) -> str:
        """What is indexed and shown: the title, then the text."""
        return f"{self.title}: {self.text}"


@dataclass(frozen=True)
class Question:
    """One question, its short answer, and the documents that answer it (one per hop)."""

    id: str
    text: str
    answer: str
    kind: str  # e.g. "person.birth_town", "company.founder.birth_year"
    subject: str  # the entity the question names
    gold: tuple[int, ...]  # ids of the documents needed, in the order they are needed
    hops: int


@dataclass(frozen=True)
class Corpus:
    seed: int
    size: int
    documents: tuple[Document, ...]
    questions: tuple[Question, ...]

    def answers_of_kind(self, kind: str) -> list[str]:
        """Every answer a question of ``kind`` has in this corpus (what a guesser chooses from)."""
        return sorted({q.answer for q in self.questions if q.kind == kind})


@dataclass
class _Town:
    name: str
    river: str
    founded: int
    trade: str
    doc: int = -1


@dataclass
class _Person:
    first: str
    last: str
    born: int
    town: _Town
    profession: str
    doc: int = -1

    @property
    def name(self) -> str:
        return f"{self.first} {self.last}"


@dataclass
class _Company:
    name: str
    founder: _Person
    founded: int
    town: _Town
    product: str
    doc: int = -1


class _Names:
    """Invented words, each used once across the whole corpus."""

    def __init__(self, rng: random.Random) -> None:
        from bm25s.stopwords import STOPWORDS_EN, STOPWORDS_EN_PLUS

        self._rng = rng
        self._used = {name.lower() for name in RESERVED_NAMES}
        self._used.update(STOPWORDS_EN, STOPWORDS_EN_PLUS)

    def word(self) -> str:
        while True:
            syllables = [self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS) for _ in range(2)]
            word = "".join(syllables) + self._rng.choice(_CODAS)
            if 4 <= len(word) <= 7 and word not in self._used:
                self._used.add(word)
                return word.capitalize()

    def words(self, count: int) -> list[str]:
        return [self.word() for _ in range(count)]


def _counts(size: int) -> tuple[int, int, int]:
    towns = max(3, size // 5)
    companies = max(1, size // 5)
    return towns, size - towns - companies, companies


def _town_text(town: _Town, variant: int) -> str:
    if variant == 0:
        return (
            f"{town.name} is a town on the river {town.river}. It was founded in {town.founded} "
            f"and is known for its {town.trade}."
        )
    return (
        f"The town of {town.name} was founded in {town.founded}. The river {town.river} flows "
        f"through it. Its markets are known for {town.trade}."
    )


def _person_text(person: _Person, variant: int) -> str:
    if variant == 0:
        return (
            f"{person.name} was born in {person.town.name} in {person.born}. "
            f"{person.first} worked as a {person.profession}."
        )
    return (
        f"{person.name} was a {person.profession}. {person.first} was born in {person.born} in "
        f"the town of {person.town.name}."
    )


def _company_text(company: _Company, variant: int) -> str:
    if variant == 0:
        return (
            f"{company.name} is a maker of {company.product} based in {company.town.name}. "
            f"It was founded in {company.founded} by {company.founder.name}."
        )
    return (
        f"{company.founder.name} founded {company.name} in {company.founded}. The company makes "
        f"{company.product} in its works in {company.town.name}."
    )


def _questions(towns: list[_Town], people: list[_Person], companies: list[_Company]) -> list[Question]:
    rows: list[tuple[str, str, str, str, tuple[int, ...]]] = []  # kind, text, answer, subject, gold
    for t in towns:
        rows.append(("town.river", f"Which river flows through {t.name}?", t.river, t.name, (t.doc,)))
        rows.append(
            ("town.founded", f"In which year was {t.name} founded?", str(t.founded), t.name, (t.doc,))
        )
        rows.append(("town.trade", f"What is {t.name} known for?", t.trade, t.name, (t.doc,)))
    for p in people:
        gold = (p.doc,)
        rows.append(("person.birth_town", f"In which town was {p.name} born?", p.town.name, p.name, gold))
        rows.append(("person.birth_year", f"In which year was {p.name} born?", str(p.born), p.name, gold))
        rows.append(("person.profession", f"What was {p.name}'s profession?", p.profession, p.name, gold))
    for c in companies:
        gold = (c.doc,)
        rows.append(("company.founder", f"Who founded {c.name}?", c.founder.name, c.name, gold))
        rows.append(("company.founded", f"In which year was {c.name} founded?", str(c.founded), c.name, gold))
        rows.append(("company.town", f"In which town is {c.name} based?", c.town.name, c.name, gold))
        rows.append(("company.product", f"What does {c.name} make?", c.product, c.name, gold))
        two_hop = (c.doc, c.founder.doc)
        rows.append(
            (
                "company.founder.birth_town",
                f"In which town was the founder of {c.name} born?",
                c.founder.town.name,
                c.name,
                two_hop,
            )
        )
        rows.append(
            (
                "company.founder.birth_year",
                f"In which year was the founder of {c.name} born?",
                str(c.founder.born),
                c.name,
                two_hop,
            )
        )
    return [
        Question(id=f"q{i}", text=text, answer=answer, kind=kind, subject=subject, gold=gold, hops=len(gold))
        for i, (kind, text, answer, subject, gold) in enumerate(rows)
    ]


@functools.lru_cache(maxsize=8)
def build_corpus(seed: int, size: int = 200) -> Corpus:
    """The corpus of ``size`` documents for ``seed`` (cached: the same object for the same args).

    A fifth of the documents are towns, a fifth companies, the rest people. Single-hop questions
    ask each entity's attributes; two-hop ones ask about a company's founder.
    """
    if size < 10:
        raise ValueError(f"search corpus size must be at least 10 documents, got {size}")
    rng = random.Random(f"rlvr-search-corpus:{seed}")
    names = _Names(rng)
    n_towns, n_people, n_companies = _counts(size)

    rivers = names.words(max(2, n_towns // 2))  # shared: several towns lie on each river
    towns = [
        _Town(names.word(), rng.choice(rivers), rng.randint(*TOWN_YEARS), rng.choice(TRADES))
        for _ in range(n_towns)
    ]
    # Small name pools make distractors: each first name and surname recurs about three times.
    pool = max(2, round(n_people / 3))
    firsts, lasts = names.words(pool), names.words(pool)
    pairs = rng.sample([(f, s) for f in firsts for s in lasts], n_people)
    people = [
        _Person(first, last, rng.randint(*BIRTH_YEARS), rng.choice(towns), rng.choice(PROFESSIONS))
        for first, last in pairs
    ]
    founders = rng.sample(people, n_companies)
    companies: list[_Company] = []
    taken: set[str] = set()
    for i, founder in enumerate(founders):
        # Every third company carries a surname from the corpus, often not its founder's.
        suffix = COMPANY_SUFFIXES[i % len(COMPANY_SUFFIXES)]
        name = f"{rng.choice(lasts)} {suffix}" if i % 3 == 0 else ""
        if not name or name in taken:
            name = f"{names.word()} {suffix}"
        taken.add(name)
        # Based away from the founder's birth town, so the founder's name never sits next to a
        # wrong birth-town answer; the founding year is never the birth year for the same reason.
        town = rng.choice([t for t in towns if t is not founder.town])
        founded = founder.born + rng.randint(*FOUNDING_AGE)
        companies.append(_Company(name, founder, founded, town, rng.choice(PRODUCTS)))

    entities: list[tuple[str, object]] = [(t.name, t) for t in towns]
    entities += [(p.name, p) for p in people] + [(c.name, c) for c in companies]
    order = list(range(len(entities)))
    rng.shuffle(order)  # the document id says nothing about the entity's kind
    documents = []
    for doc_id, index in enumerate(order):
        title, entity = entities[index]
        entity.doc = doc_id  # type: ignore[attr-defined]
        variant = rng.randrange(2)
        if isinstance(entity, _Town):
            text = _town_text(entity, variant)
        elif isinstance(entity, _Person):
            text = _person_text(entity, variant)
        else:
            assert isinstance(entity, _Company)
            text = _company_text(entity, variant)
        documents.append(Document(id=doc_id, title=title, text=text))
    return Corpus(
        seed=seed,
        size=size,
        documents=tuple(documents),
        questions=tuple(_questions(towns, people, companies)),
    )
