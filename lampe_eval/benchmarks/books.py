"""Book-length documents for the benchmarks that need long natural text (PG-19's passages, BABILong's
background): a folder of ``*.txt`` books, a text data set's split on the hub (the PG-19 test set's Parquet
files), or the offline corpus of :mod:`lampe_eval.data` (only where the user asks for it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..data import hub
from ..data.sources import HubFiles
from ..errors import MissingDataError
from .datafiles import read_rows

DEFAULT_DATASET = "emozilla/pg19-test"


@dataclass(frozen=True)
class Document:
    """One book: where it comes from and its text."""

    doc_id: str
    title: str
    text: str
    source: str


def offline_documents() -> list[Document]:
    """The offline corpus's books (the KJV's 66), in order; a one-line error when it is not installed."""
    from ..data import offline_books

    return [
        Document(doc_id=f"kjv-{i:02d}", title=book.title, text=book.text, source=book.source)
        for i, book in enumerate(offline_books())
    ]


def directory_documents(path: str | Path) -> list[Document]:
    """Every ``*.txt`` file of a folder, one book each, sorted by name."""
    root = Path(path)
    files = sorted(root.glob("*.txt"))
    if not files:
        raise MissingDataError(f"pg19: no *.txt documents in {root}")
    return [
        Document(
            doc_id=f.stem, title=f.stem, text=f.read_text(encoding="utf-8", errors="replace"), source=str(f)
        )
        for f in files
    ]


def hub_documents(
    dataset: str = DEFAULT_DATASET,
    split: str = "test",
    field: str = "text",
    title_field: str = "short_book_title",
    copies: list[Path] | None = None,
) -> tuple[str, list[Document]]:
    """(source label, books) of the PG-19 test set (or any text data set) on the hub: the split's data files
    as the repository declares them (Parquet), downloaded into the hub cache or read from it offline
    (``copies``: folders holding a copy of the repository's files, read first)."""
    snapshot = hub.read(book_files(dataset, split), copies=copies or ())
    rows = read_rows(list(snapshot.paths.values()))
    if rows and field not in rows[0]:
        raise MissingDataError(f"pg19: {dataset!r} has no field {field!r} (fields: {', '.join(rows[0])})")
    label = snapshot.label()
    docs = [
        Document(
            doc_id=f"{i:05d}",
            title=str(row.get(title_field) or f"{dataset}#{i}"),
            text=str(row[field]),
            source=label,
        )
        for i, row in enumerate(rows)
    ]
    return label, docs


def book_files(dataset: str, split: str) -> HubFiles:
    """The data files of a text data set's split on the hub (the PG-19 test set: Parquet)."""
    return HubFiles(dataset, split=split)
