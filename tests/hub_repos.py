"""Miniature copies of the hub repositories lampe-eval reads, laid out as the real ones are (as read on
2026-11-28), built from the project's own fixtures so tests can run the real clients against
:class:`tests.localhub.LocalHub`.

Each builder returns ``{repo_id: {path: bytes}}``; :data:`MOVED` lists the renamed ids (THUDM became
zai-org: the hub redirects the old ids), :data:`GATED` the gated repositories and :data:`MODELS` the
model repositories. Everything is deterministic (fixed zip/tar/gzip times, seeded weights) and cached per
process; :func:`add_default_repos` adds them all to a hub.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import re
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import lampe_eval

from .localhub import LocalHub

Files = dict[str, bytes]
Repos = dict[str, Files]

FIXTURES = (
    Path(lampe_eval.__file__).parent / "resources" / "fixtures"
)  # the package's own, not a user override
TEST_FIXTURES = Path(__file__).parent / "fixtures"
ZIP_TIME = (2023, 8, 1, 0, 0, 0)

MOVED = {"zai-org/LongBench": ("THUDM/LongBench",), "zai-org/LongBench-v2": ("THUDM/LongBench-v2",)}
GATED = {"gated/llama-gated"}
MODELS = {"tiny/llama-random", "gated/llama-gated", "remote/custom-arch", "phi3/tiny-phi3"}
BABILONG_TASKS = ("qa1", "qa2", "qa3", "qa4", "qa5")
# name -> words of background: every length the real repository has; past 4k the miniature keeps 4k's size
BABILONG_LENGTHS = {"0k": 0, "1k": 700, "2k": 1400, "4k": 2800} | {
    name: 2800 for name in ("8k", "16k", "32k", "64k", "128k", "256k", "512k", "1M")
}


def _card(front: Mapping[str, Any], body: str) -> bytes:
    """A README with YAML front matter, as the hub's dataset and model cards are."""
    return ("---\n" + _yaml(front) + "---\n\n" + body.strip() + "\n").encode()


def _yaml(value: Any) -> str:
    import yaml

    return str(yaml.safe_dump(dict(value), sort_keys=False, allow_unicode=True))


def _zip(members: Mapping[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return out.getvalue()


def _tar_gz(members: Mapping[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1443052800, 0o644
            archive.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as packed:
        packed.write(raw.getvalue())
    return out.getvalue()


def _parquet(rows: Sequence[Mapping[str, Any]], schema: Any) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(list(rows), schema=schema)
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _script(name: str, url: str) -> bytes:
    """A dataset loading script, as script-based repositories still hold (datasets >= 4 refuses them)."""
    return f'''"""{name}: the loading script of the original repository (``datasets`` < 4 ran it)."""

import json

import datasets

_URL = "{url}"


class {re.sub(r"[^A-Za-z0-9]", "", name)}(datasets.GeneratorBasedBuilder):
    def _info(self):
        return datasets.DatasetInfo(description="{name}")

    def _split_generators(self, dl_manager):
        path = dl_manager.download_and_extract(_URL)
        return [datasets.SplitGenerator(name=datasets.Split.TEST, gen_kwargs={{"path": path}})]

    def _generate_examples(self, path):
        with open(path, encoding="utf-8") as handle:
            for key, line in enumerate(handle):
                yield key, json.loads(line)
'''.encode()


# ------------------------------------------------------------------------------------------ datasets
@cache
def longbench() -> Repos:
    """``zai-org/LongBench`` (was THUDM/LongBench): the loading script, the card and ``data.zip`` holding
    ``data/<task>.jsonl`` for every fixture, byte for byte."""
    members = {f"data/{p.name}": p.read_bytes() for p in sorted((FIXTURES / "longbench").glob("*.jsonl"))}
    card = _card(
        {
            "task_categories": [
                "question-answering",
                "text-generation",
                "summarization",
                "text-classification",
            ],
            "language": ["en", "zh"],
            "tags": ["Long Context"],
            "size_categories": ["1K<n<10K"],
        },
        "# LongBench\n\nA bilingual, multitask benchmark for long context understanding (miniature copy).",
    )
    return {
        "zai-org/LongBench": {
            "LongBench.py": _script(
                "LongBench", "https://huggingface.co/datasets/zai-org/LongBench/resolve/main/data.zip"
            ),
            "README.md": card,
            "data.zip": _zip(members),
        }
    }


@cache
def leval() -> Repos:
    """``L4NLP/LEval``: script, card, ``LEval/Exam/<task>.jsonl`` per fixture and one generation task."""
    files: Files = {
        "LEval.py": _script("LEval", "https://huggingface.co/datasets/L4NLP/LEval/resolve/main/LEval"),
        "README.md": _card(
            {
                "license": "gpl-3.0",
                "task_categories": ["summarization", "question-answering", "multiple-choice"],
            },
            "# L-Eval\n\nInstruction-following long-context evaluation (miniature copy).",
        ),
    }
    for path in sorted((FIXTURES / "leval").glob("*.jsonl")):
        files[f"LEval/Exam/{path.name}"] = path.read_bytes()
    generation = {
        "instructions": ["Summarize the meeting in one sentence."],
        "outputs": ["The team agreed to ship the release on Friday."],
        "input": "Alice: the tests pass. Bob: then we ship on Friday. Carol: agreed, Friday it is.",
        "source": "localhub",
        "evaluation": "LLM",
    }
    files["LEval/Generation/meeting_summ.jsonl"] = (json.dumps(generation) + "\n").encode()
    return {"L4NLP/LEval": files}


@cache
def longbench_v2() -> Repos:
    """``zai-org/LongBench-v2`` (was THUDM/LongBench-v2): ``data.json``, one JSON array of the records."""
    records = _jsonl(FIXTURES / "longbench_v2" / "longbench_v2.jsonl")
    card = _card(
        {
            "task_categories": ["multiple-choice", "question-answering", "text-classification"],
            "language": ["en"],
            "tags": ["Long Context", "reasoning"],
            "size_categories": ["n<1K"],
            "license": "apache-2.0",
        },
        "# LongBench v2\n\nload_dataset('zai-org/LongBench-v2', split='train') (miniature copy).",
    )
    return {"zai-org/LongBench-v2": {"README.md": card, "data.json": json.dumps(records, indent=2).encode()}}


@cache
def infinitebench() -> Repos:
    """``xinrongzhang2022/InfiniteBench``: ``<task>.jsonl`` per fixture; the card's ``configs`` name one split
    per task, as the real card does (``load_dataset(repo, split=task, features=...)``)."""
    files: Files = {}
    tasks = sorted((FIXTURES / "infinitebench").glob("*.jsonl"))
    for path in tasks:
        files[path.name] = path.read_bytes()
    configs = [
        {"config_name": "default", "data_files": [{"split": p.stem, "path": p.name} for p in tasks]},
    ]
    files["README.md"] = _card(
        {"license": "apache-2.0", "language": ["en", "zh"], "configs": configs},
        "# InfiniteBench\n\n100K+ token long-context benchmark (miniature copy).",
    )
    return {"xinrongzhang2022/InfiniteBench": files}


def _babi_stories(path: Path) -> list[tuple[list[str], str, str]]:
    """(facts so far, question, answer) for every question of a bAbI file."""
    out: list[tuple[list[str], str, str]] = []
    facts: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        number, _, text = line.partition(" ")
        if number == "1":
            facts = []
        if "\t" in text:
            question, answer = text.split("\t")[:2]
            out.append((list(facts), question.strip(), answer.strip()))
        else:
            facts.append(text.strip())
    return out


@cache
def _background_words() -> tuple[str, ...]:
    return tuple(" ".join(_book_texts(1, 40_000)).split())


@cache
def babilong() -> Repos:
    """``RMT-team/babilong``: ``data/<task>/<length>.json`` (a JSON array of ``input``, ``question``,
    ``target``) for qa1..qa5 at every length (0k..1M; past 4k with 4k's background size): the fixture
    stories' facts spread through background text,
    and a card whose ``configs`` map each length to one split per task, as the real card does."""
    files: Files = {}
    words = _background_words()
    for task in BABILONG_TASKS:
        source = next((FIXTURES / "babilong").glob(f"{task}_*_train.txt"))
        stories = _babi_stories(source)[:3]
        for length, count in BABILONG_LENGTHS.items():
            records = []
            for index, (facts, question, answer) in enumerate(stories):
                rng = random.Random(f"{task}/{length}/{index}")
                start = rng.randrange(max(1, len(words) - count))
                background = " ".join(words[start : start + count])
                sentences = [s for s in re.split(r"(?<=[.;:])\s+", background) if s] if count else []
                places = sorted(rng.randrange(len(sentences) + 1) for _ in facts)
                for shift, (place, fact) in enumerate(zip(places, facts, strict=True)):
                    sentences.insert(place + shift, fact)
                records.append({"input": " ".join(sentences), "question": question, "target": answer})
            files[f"data/{task}/{length}.json"] = json.dumps(records, indent=1).encode()
    configs = [
        {
            "config_name": length,
            "data_files": [{"split": task, "path": f"data/{task}/{length}.json"} for task in BABILONG_TASKS],
        }
        for length in BABILONG_LENGTHS
    ]
    files["README.md"] = _card(
        {"language": ["en"], "license": "apache-2.0", "configs": configs},
        "# BABILong\n\nbAbI tasks hidden in PG-19 background text (miniature copy).",
    )
    return {"RMT-team/babilong": files}


@cache
def babi_qa() -> Repos:
    """``facebook/babi_qa``: the bAbI v1.2 archive with ``tasks_1-20_v1-2/en-10k/<file>_train.txt`` for each
    fixture."""
    members = {
        f"tasks_1-20_v1-2/en-10k/{p.name}": p.read_bytes()
        for p in sorted(
            (FIXTURES / "babilong").glob("*_train.txt"), key=lambda p: int(p.name[2:].split("_")[0])
        )
    }
    card = _card(
        {"language": ["en"], "license": "cc-by-3.0"}, "# bAbI\n\nThe bAbI tasks v1.2 (miniature copy)."
    )
    return {"facebook/babi_qa": {"README.md": card, "data/tasks_1-20_v1-2.tar.gz": _tar_gz(members)}}


@cache
def _book_texts(count: int, chars: int) -> tuple[str, ...]:
    """``count`` book-length public-domain texts: the KJV books of :mod:`lampe_eval.data.corpus` when the
    ``bible`` command is installed, else seeded lorem-like prose."""
    try:
        from lampe_eval.data.corpus import offline_books, prose

        books = offline_books()
        texts = [prose(book.text) for book in books[:count]]
    except Exception:  # noqa: BLE001 - the corpus is optional: any failure means "not installed"
        texts = [_lorem(i, chars) for i in range(count)]
    return tuple(_cut(text, chars) for text in texts)


def _cut(text: str, chars: int) -> str:
    """The text up to ``chars`` characters, ending at a sentence."""
    if len(text) <= chars:
        return text
    end = text.rfind(".", 0, chars)
    return text[: end + 1 if end > 0 else chars]


LOREM_WORDS = (
    "the",
    "river",
    "lamp",
    "morning",
    "harbour",
    "letter",
    "stone",
    "garden",
    "winter",
    "captain",
    "house",
    "road",
    "village",
    "evening",
    "window",
    "bread",
    "silver",
    "forest",
    "bridge",
    "brother",
    "mother",
    "field",
    "church",
    "market",
    "candle",
    "journey",
    "ship",
)


def _lorem(seed: int, chars: int) -> str:
    rng = random.Random(seed)
    words = LOREM_WORDS
    sentences: list[str] = []
    while sum(len(s) + 1 for s in sentences) < chars:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(6, 16)))
        sentences.append(sentence[0].upper() + sentence[1:] + ".")
    return " ".join(sentences)


@cache
def pg19_test() -> Repos:
    """``emozilla/pg19-test``: one parquet file of 3 books (``short_book_title``, ``publication_date``,
    ``url``, ``text``) and a card with the ``configs`` mapping split ``test`` to it."""
    import pyarrow as pa

    schema = pa.schema(
        [
            ("short_book_title", pa.string()),
            ("publication_date", pa.int64()),
            ("url", pa.string()),
            ("text", pa.string()),
        ]
    )
    titles = ("The Book of Genesis", "The Book of Exodus", "The Book of Leviticus")
    rows = [
        {
            "short_book_title": title,
            "publication_date": 1611,
            "url": f"http://www.gutenberg.org/ebooks/{10 + i}",
            "text": text,
        }
        for i, (title, text) in enumerate(zip(titles, _book_texts(3, 100_000), strict=True))
    ]
    configs = [{"config_name": "default", "data_files": [{"split": "test", "path": "data/test-*"}]}]
    card = _card(
        {"configs": configs},
        "# PG-19 test set\n\nThe test split of deepmind/pg19 as parquet (miniature copy).",
    )
    return {
        "emozilla/pg19-test": {"README.md": card, "data/test-00000-of-00001.parquet": _parquet(rows, schema)}
    }


@cache
def pg19() -> Repos:
    """``deepmind/pg19``: only its loading script and card (``datasets`` refuses it)."""
    card = _card({"language": ["en"], "license": "apache-2.0"}, "# PG-19\n\nLanguage modelling benchmark.")
    return {"deepmind/pg19": {"pg19.py": _script("Pg19", "gs://deepmind-gutenberg/test"), "README.md": card}}


def _squad_rows(path: Path) -> list[dict[str, Any]]:
    """The hub's rows of SQuAD v2 (one per question) from a file in the official format."""
    rows = []
    for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [] if qa.get("is_impossible") else qa.get("answers", [])
                rows.append(
                    {
                        "id": qa["id"],
                        "title": article["title"],
                        "context": paragraph["context"],
                        "question": qa["question"],
                        "answers": {
                            "text": [a["text"] for a in answers],
                            "answer_start": [a["answer_start"] for a in answers],
                        },
                    }
                )
    return rows


@cache
def squad_v2() -> Repos:
    """``rajpurkar/squad_v2``: ``squad_v2/{train,validation}-00000-of-00001.parquet`` in the hub's row schema
    (both from tests/fixtures/ruler/squad.json) and its card's ``configs``."""
    import pyarrow as pa

    schema = pa.schema(
        [
            ("id", pa.string()),
            ("title", pa.string()),
            ("context", pa.string()),
            ("question", pa.string()),
            ("answers", pa.struct([("text", pa.list_(pa.string())), ("answer_start", pa.list_(pa.int32()))])),
        ]
    )
    rows = _squad_rows(TEST_FIXTURES / "ruler" / "squad.json")
    configs = [
        {
            "config_name": "squad_v2",
            "data_files": [
                {"split": "train", "path": "squad_v2/train-*"},
                {"split": "validation", "path": "squad_v2/validation-*"},
            ],
            "default": True,
        }
    ]
    card = _card(
        {"language": ["en"], "license": "cc-by-sa-4.0", "pretty_name": "SQuAD2.0", "configs": configs},
        "# SQuAD 2.0\n\nReading comprehension with unanswerable questions (miniature copy).",
    )
    return {
        "rajpurkar/squad_v2": {
            "README.md": card,
            "squad_v2/train-00000-of-00001.parquet": _parquet(rows, schema),
            "squad_v2/validation-00000-of-00001.parquet": _parquet(rows, schema),
        }
    }


def _hotpot_rows(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The hub's rows of HotpotQA (struct columns of parallel lists) from files in the official format."""
    rows = []
    for path in paths:
        for item in json.loads(path.read_text(encoding="utf-8")):
            rows.append(
                {
                    "id": item["_id"],
                    "question": item["question"],
                    "answer": item["answer"],
                    "type": item.get("type", "bridge"),
                    "level": item.get("level", "medium"),
                    "supporting_facts": {
                        "title": [f[0] for f in item["supporting_facts"]],
                        "sent_id": [int(f[1]) for f in item["supporting_facts"]],
                    },
                    "context": {
                        "title": [c[0] for c in item["context"]],
                        "sentences": [list(c[1]) for c in item["context"]],
                    },
                }
            )
    return rows


HOTPOT_VALIDATION = (
    TEST_FIXTURES / "ruler2" / "hotpot_dev_distractor_v1.json",
    TEST_FIXTURES / "ruler" / "hotpotqa.json",
)
HOTPOT_TRAIN = (TEST_FIXTURES / "ruler2" / "hotpot_train_v1.1.json",)


@cache
def hotpot_qa(
    validation: tuple[Path, ...] = HOTPOT_VALIDATION, train: tuple[Path, ...] = HOTPOT_TRAIN
) -> Repos:
    """``hotpotqa/hotpot_qa``: ``distractor/{validation,train}-00000-of-00001.parquet`` in the hub's schema;
    validation holds RULERv2's dev fixture then RULER's (``validation=``: other official-format files)."""
    import pyarrow as pa

    strings = pa.list_(pa.string())
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("question", pa.string()),
            ("answer", pa.string()),
            ("type", pa.string()),
            ("level", pa.string()),
            ("supporting_facts", pa.struct([("title", strings), ("sent_id", pa.list_(pa.int32()))])),
            ("context", pa.struct([("title", strings), ("sentences", pa.list_(strings))])),
        ]
    )
    configs = [
        {
            "config_name": "distractor",
            "data_files": [
                {"split": "train", "path": "distractor/train-*"},
                {"split": "validation", "path": "distractor/validation-*"},
            ],
        }
    ]
    card = _card(
        {"language": ["en"], "license": "cc-by-sa-4.0", "pretty_name": "HotpotQA", "configs": configs},
        "# HotpotQA\n\nMulti-hop question answering (miniature copy: the distractor setting only).",
    )
    return {
        "hotpotqa/hotpot_qa": {
            "README.md": card,
            "distractor/train-00000-of-00001.parquet": _parquet(_hotpot_rows(train), schema),
            "distractor/validation-00000-of-00001.parquet": _parquet(_hotpot_rows(validation), schema),
        }
    }


@cache
def mmlu() -> Repos:
    """``cais/mmlu`` config ``all``: ``all/test`` (tests/fixtures/ruler2/mmlu_test.jsonl),
    ``all/auxiliary_train`` (mmlu_auxiliary_train.jsonl), and small ``dev``/``validation`` splits (the first
    test questions) so the card's four splits exist as on the hub."""
    import pyarrow as pa

    schema = pa.schema(
        [
            ("question", pa.string()),
            ("subject", pa.string()),
            ("choices", pa.list_(pa.string())),
            ("answer", pa.int64()),
        ]
    )
    test = _jsonl(TEST_FIXTURES / "ruler2" / "mmlu_test.jsonl")
    splits = {
        "auxiliary_train": _jsonl(TEST_FIXTURES / "ruler2" / "mmlu_auxiliary_train.jsonl"),
        "dev": test[:5],
        "test": test,
        "validation": test[5:10],
    }
    configs = [
        {
            "config_name": "all",
            "data_files": [{"split": split, "path": f"all/{split}-*"} for split in splits],
        }
    ]
    card = _card(
        {
            "language": ["en"],
            "license": "mit",
            "pretty_name": "Measuring Massive Multitask Language Understanding",
            "configs": configs,
        },
        "# MMLU\n\n57 subjects of multiple-choice questions (miniature copy: config `all` only).",
    )
    files: Files = {"README.md": card}
    for split, rows in splits.items():
        files[f"all/{split}-00000-of-00001.parquet"] = _parquet(rows, schema)
    return {"cais/mmlu": files}


# -------------------------------------------------------------------------------------------- models
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CUSTOM_MODELING = b'''"""A model type transformers does not know: only trust_remote_code loads it."""

from transformers import LlamaConfig, LlamaForCausalLM


class CustomConfig(LlamaConfig):
    model_type = "lampe_custom"


class CustomForCausalLM(LlamaForCausalLM):
    config_class = CustomConfig
'''
PHI3_CONFIGURATION = b'''"""Phi-3's configuration as its repository ships it (transformers has its own)."""

from transformers.models.phi3.configuration_phi3 import Phi3Config as _Phi3Config


class Phi3Config(_Phi3Config):
    remote_code = True  # tells the repository's copy from transformers' own
'''
PHI3_MODELING = b'''"""Phi-3's modeling code as its repository ships it (transformers has it natively)."""

from transformers.models.phi3.modeling_phi3 import Phi3ForCausalLM as _Phi3ForCausalLM

from .configuration_phi3 import Phi3Config


class Phi3ForCausalLM(_Phi3ForCausalLM):
    config_class = Phi3Config
'''


def _tokenizer_texts() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted(FIXTURES.rglob("*")) if p.is_file()]


@cache
def _tokenizer() -> Any:
    """A byte-level BPE tokenizer of 512 tokens trained on the fixtures (ChatML special tokens and template):
    small (~20 KB) and built in milliseconds, unlike SmolLM2's 49K-token one (3.5 MB)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_tokenizer_texts(), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        pad_token="<|im_end|>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


SHAPE = {"hidden": 64, "heads": 4, "kv_heads": 2, "layers": 2, "intermediate": 128, "window": 512}


def _config(model_type: str, vocab: int) -> dict[str, Any]:
    """config.json of a tiny Llama or Phi-3, in the format checkpoints on the hub carry (``rope_theta``,
    ``torch_dtype``: transformers 5 reads them as it reads the real repositories)."""
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM" if model_type == "llama" else "Phi3ForCausalLM"],
        "model_type": model_type,
        "vocab_size": vocab,
        "hidden_size": SHAPE["hidden"],
        "intermediate_size": SHAPE["intermediate"],
        "num_hidden_layers": SHAPE["layers"],
        "num_attention_heads": SHAPE["heads"],
        "num_key_value_heads": SHAPE["kv_heads"],
        "max_position_embeddings": SHAPE["window"],
        "hidden_act": "silu",
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "initializer_range": 0.02,
        "torch_dtype": "float32",
        "use_cache": True,
    }
    if model_type == "llama":
        config.update(
            {"rms_norm_eps": 1e-6, "attention_bias": False, "mlp_bias": False, "pad_token_id": None}
        )
    else:
        config.update(
            {
                "rms_norm_eps": 1e-5,
                "pad_token_id": 0,
                "original_max_position_embeddings": SHAPE["window"],
                "sliding_window": None,
                "embd_pdrop": 0.0,
                "resid_pdrop": 0.0,
                "attention_dropout": 0.0,
            }
        )
    return config


def _weights(model_type: str, vocab: int, seed: int = 3) -> dict[str, Any]:
    """Random weights under the checkpoint names of Llama (separate q/k/v, gate/up) or Phi-3 (fused qkv and
    gate_up): norms in [0.5, 1.5), the rest normal with deviation 0.2 (as ``save_random_checkpoint`` draws
    them: no near ties), from a seeded generator."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    hidden, inter = SHAPE["hidden"], SHAPE["intermediate"]
    head_dim = hidden // SHAPE["heads"]
    q, kv = SHAPE["heads"] * head_dim, SHAPE["kv_heads"] * head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(SHAPE["layers"]):
        layer = f"model.layers.{i}"
        if model_type == "llama":
            shapes[f"{layer}.self_attn.q_proj.weight"] = (q, hidden)
            shapes[f"{layer}.self_attn.k_proj.weight"] = (kv, hidden)
            shapes[f"{layer}.self_attn.v_proj.weight"] = (kv, hidden)
            shapes[f"{layer}.mlp.gate_proj.weight"] = (inter, hidden)
            shapes[f"{layer}.mlp.up_proj.weight"] = (inter, hidden)
        else:
            shapes[f"{layer}.self_attn.qkv_proj.weight"] = (q + 2 * kv, hidden)
            shapes[f"{layer}.mlp.gate_up_proj.weight"] = (2 * inter, hidden)
        shapes[f"{layer}.self_attn.o_proj.weight"] = (hidden, q)
        shapes[f"{layer}.mlp.down_proj.weight"] = (hidden, inter)
        shapes[f"{layer}.input_layernorm.weight"] = (hidden,)
        shapes[f"{layer}.post_attention_layernorm.weight"] = (hidden,)
    shapes["model.norm.weight"] = (hidden,)
    shapes["lm_head.weight"] = (vocab, hidden)
    return {
        name: (
            torch.rand(shape, generator=generator) + 0.5
            if "norm" in name
            else torch.randn(shape, generator=generator) * 0.2
        )
        for name, shape in shapes.items()
    }


@cache
def _checkpoint(model_type: str) -> Files:
    """A tiny random ``llama`` or ``phi3`` (2 layers, hidden 64) with the tokenizer, as the files of a hub
    repository. Written directly (safetensors, JSON) rather than through a transformers model: importing
    transformers' model or config classes costs seconds (it pulls in generation and scikit-learn), which the
    session's hub would pay before any test needs a model."""
    import safetensors.torch

    tokenizer = _tokenizer()
    vocab = len(tokenizer)
    with tempfile.TemporaryDirectory() as where:
        tokenizer.save_pretrained(where)
        files = {p.name: p.read_bytes() for p in sorted(Path(where).iterdir()) if p.is_file()}
    generation = {
        "bos_token_id": 1,
        "eos_token_id": 2,
        **({"pad_token_id": 0} if model_type == "phi3" else {}),
    }
    files["config.json"] = _json(_config(model_type, vocab))
    files["generation_config.json"] = _json({"_from_model_config": True, **generation})
    weights = _weights(model_type, vocab)
    files["model.safetensors"] = safetensors.torch.save(weights, metadata={"format": "pt"})
    return dict(sorted(files.items()))


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def _model_card(model_type: str, note: str) -> bytes:
    front = {"library_name": "transformers", "license": "apache-2.0", "pipeline_tag": "text-generation"}
    return _card({**front, "tags": ["localhub", model_type]}, f"# A tiny random {model_type} model\n\n{note}")


def _with_config(files: Files, **changes: Any) -> Files:
    config = json.loads(files["config.json"])
    config.update(changes)
    return {**files, "config.json": _json(config)}


@cache
def models() -> Repos:
    """The model repositories: ``tiny/llama-random`` (a random LlamaForCausalLM with a 512-token BPE
    tokenizer), ``gated/llama-gated`` (the same files, gated), ``remote/custom-arch`` (a model type
    transformers does not know, ``auto_map`` to ``modeling_custom``), ``phi3/tiny-phi3`` (a random Phi-3 whose
    config carries Phi-3-mini's ``auto_map`` to ``configuration_phi3``/``modeling_phi3`` although
    transformers implements phi3 natively)."""
    llama = _checkpoint("llama")
    phi3 = _checkpoint("phi3")
    custom = _with_config(
        llama,
        model_type="lampe_custom",
        architectures=["CustomForCausalLM"],
        auto_map={
            "AutoConfig": "modeling_custom.CustomConfig",
            "AutoModelForCausalLM": "modeling_custom.CustomForCausalLM",
        },
    )
    phi3 = _with_config(
        phi3,
        auto_map={
            "AutoConfig": "configuration_phi3.Phi3Config",
            "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM",
        },
    )
    return {
        "tiny/llama-random": {**llama, "README.md": _model_card("llama", "Random weights, for tests.")},
        "gated/llama-gated": {**llama, "README.md": _model_card("llama", "Gated: accept the conditions.")},
        "remote/custom-arch": {
            **custom,
            "modeling_custom.py": CUSTOM_MODELING,
            "README.md": _model_card("lampe_custom", "Needs trust_remote_code."),
        },
        "phi3/tiny-phi3": {
            **phi3,
            "configuration_phi3.py": PHI3_CONFIGURATION,
            "modeling_phi3.py": PHI3_MODELING,
            "README.md": _model_card(
                "phi3", "Ships Phi-3's remote code like microsoft/Phi-3-mini-4k-instruct."
            ),
        },
    }


# -------------------------------------------------------------------------------------------- all
DATASETS = (
    longbench,
    leval,
    longbench_v2,
    infinitebench,
    babilong,
    babi_qa,
    pg19_test,
    pg19,
    squad_v2,
    hotpot_qa,
    mmlu,
)


def dataset_repos() -> Repos:
    """Every dataset repository: ``{repo_id: {path: bytes}}``."""
    out: Repos = {}
    for build in DATASETS:
        out.update(build())
    return out


def default_repos() -> dict[str, tuple[str, Files]]:
    """Every repository: ``{repo_id: (repo_type, files)}``."""
    out = {repo_id: ("dataset", files) for repo_id, files in dataset_repos().items()}
    out.update({repo_id: ("model", files) for repo_id, files in models().items()})
    return out


def add_default_repos(hub: LocalHub) -> dict[str, str]:
    """Add every repository to ``hub`` (renamed ids redirecting, ``gated/llama-gated`` gated); returns
    ``{repo_id: commit sha}``."""
    return {
        repo_id: hub.add_repo(
            repo_id,
            files,
            repo_type=repo_type,
            gated=repo_id in GATED,
            moved_from=MOVED.get(repo_id, ()),
        )
        for repo_id, (repo_type, files) in default_repos().items()
    }
