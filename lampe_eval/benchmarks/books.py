"""Book-length documents for the benchmarks that need long natural text (PG-19's passages, BABILong's
background): a folder of ``*.txt`` books, a text data set through ``datasets`` (the PG-19 test set), or the
offline corpus of :mod:`lampe_eval.data`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import MissingDataError

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
) -> list[Document]:
    """The PG-19 test set (or any text dataset) through ``datasets``; needs hub access."""
    try:
        import datasets

        data = datasets.load_dataset(dataset, split=split)
    except Exception as err:  # noqa: BLE001 - no network, unknown id, missing script: one clear message
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise MissingDataError(
            f"pg19: cannot load {dataset!r} split {split!r} ({first}); without hub access drop "
            "--opt pg19_dataset to use the offline corpus"
        ) from err
    if field not in data.column_names:
        raise MissingDataError(f"pg19: {dataset!r} has no field {field!r} (fields: {data.column_names})")
    docs = []
    for i, row in enumerate(data):
        title = str(row.get(title_field) or f"{dataset}#{i}")
        docs.append(
            Document(doc_id=f"{i:05d}", title=title, text=str(row[field]), source=f"{dataset}:{split}")
        )
    return docs
