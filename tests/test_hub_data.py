"""Every benchmark's default data through the hub's own client code (huggingface_hub, transformers) against
the local hub (tests/localhub.py), whose miniature repositories are laid out as the real ones are today,
loading scripts included (tests/hub_repos.py): the records read equal the official files byte for byte,
only the files a job needs are downloaded, the commit read names every sample's source, ``data fetch`` then
an offline run works, and a missing, gated or wrong source is one line before any model loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lampe_eval.benchmarks import get_benchmark
from lampe_eval.benchmarks.base import SampleContext
from lampe_eval.cli import main
from lampe_eval.data import hub
from lampe_eval.errors import MissingDataError
from lampe_eval.models import LoadedModel
from lampe_eval.runner.experiment import Experiment
from lampe_eval.runner.jobs import Job
from lampe_eval.runner.local import run
from tests import hub_repos
from tests.localhub import LocalHub, set_offline

FIXTURES = hub_repos.FIXTURES


def samples(lm: LoadedModel, bench: str, task: str, length: int, **options: Any) -> list[Any]:
    return list(
        get_benchmark(bench).samples(task, SampleContext(lm=lm, length=length, limit=2, options=options))
    )


def without_source(sample: Any) -> tuple[Any, ...]:
    meta = {k: v for k, v in sample.meta.items() if k != "data_source"}
    return (sample.sample_id, sample.prompt, sample.references, meta)


# ------------------------------------------------------------------------ every benchmark, its real files
@pytest.mark.parametrize(
    ("bench", "task", "repo", "files"),
    [
        ("longbench", "qasper", "zai-org/LongBench", {"data.zip"}),
        ("longbench", "hotpotqa_e", "zai-org/LongBench", {"data.zip"}),
        ("leval", "coursera", "L4NLP/LEval", {"LEval/Exam/coursera.jsonl"}),
        ("longbench_v2", "longbench_v2", "zai-org/LongBench-v2", {"data.json"}),
    ],
)
def test_the_official_records_come_from_the_repository_files(
    hub_env: LocalHub, lm: LoadedModel, bench: str, task: str, repo: str, files: set[str]
) -> None:
    """The hub's files give the very samples the official files (the fixtures, the same bytes) give; only
    the task's file is downloaded (LongBench: its archive), never a loading script."""
    from_hub = samples(lm, bench, task, 4096)
    from_files = samples(lm, bench, task, 4096, fixture=True)
    assert from_hub and [without_source(s) for s in from_hub] == [without_source(s) for s in from_files]
    commit = hub_env.head(repo)
    assert all(s.meta["data_source"].startswith(f"hub:{repo}@{commit[:12]}:") for s in from_hub)
    assert {path for name, path in hub_env.downloads() if name == repo} == files


def test_the_old_thudm_ids_still_work(hub_env: LocalHub, lm: LoadedModel) -> None:
    (sample, *_) = samples(lm, "longbench", "qasper", 4096, longbench_dataset="THUDM/LongBench")
    assert sample.meta["data_source"].startswith(
        f"hub:THUDM/LongBench@{hub_env.head('zai-org/LongBench')[:12]}:"
    )
    (v2, *_) = samples(lm, "longbench_v2", "longbench_v2", 4096, longbench_v2_dataset="THUDM/LongBench-v2")
    assert v2.meta["data_source"].startswith("hub:THUDM/LongBench-v2@")


def test_infinitebench_downloads_the_one_task_file(hub_env: LocalHub, lm: LoadedModel) -> None:
    from_hub = samples(lm, "infinitebench", "longbook_qa_eng", 4096)
    from_files = samples(lm, "infinitebench", "longbook_qa_eng", 4096, fixture=True)  # ids: fixture-<id>
    assert [(s.prompt, s.references) for s in from_hub] == [(s.prompt, s.references) for s in from_files]
    assert hub_env.downloads() == [("xinrongzhang2022/InfiniteBench", "longbook_qa_eng.jsonl")]


def test_babilong_reads_only_the_requested_length_and_task(hub_env: LocalHub, lm: LoadedModel) -> None:
    (sample, *_) = samples(lm, "babilong", "qa2", 1024)
    wanted = json.loads(hub_env.files("RMT-team/babilong")["data/qa2/1k.json"])
    assert sample.meta["question"] == wanted[0]["question"] and sample.references == [wanted[0]["target"]]
    assert sample.meta["data_source"].startswith("hub:RMT-team/babilong@") and "data/qa2/1k.json" in str(
        sample.meta["data_source"]
    )
    assert {p for _, p in hub_env.downloads()} == {"README.md", "data/qa2/1k.json"}


def test_babilong_generation_reads_babi_and_pg19_from_the_hub(hub_env: LocalHub, lm: LoadedModel) -> None:
    (sample, *_) = samples(lm, "babilong", "qa1", 3000, cache=False)
    source = str(sample.meta["data_source"])
    assert "hub:facebook/babi_qa@" in source and "tasks_1-20_v1-2/en-10k/qa1_single-supporting-fact" in source
    assert " in pg19:hub:emozilla/pg19-test@" in source  # the background: PG-19, never a stand-in
    assert sample.meta["background_books"]


def test_pg19_reads_the_parquet_test_split(hub_env: LocalHub, lm: LoadedModel) -> None:
    (sample, *_) = samples(lm, "pg19", "pg19", 512)
    assert sample.meta["data_source"].startswith(
        f"hub:emozilla/pg19-test@{hub_env.head('emozilla/pg19-test')[:12]}:"
    )
    assert "data/test-00000-of-00001.parquet" in sample.meta["data_source"]
    assert sample.meta["prompt_tokens"] == 512


def test_the_loading_scripts_are_never_run(hub_env: LocalHub, lm: LoadedModel) -> None:
    samples(lm, "longbench", "qasper", 4096)
    samples(lm, "leval", "tpo", 4096)
    paths = {path for _, path in hub_env.downloads()}
    assert not {"LongBench.py", "LEval.py"} & paths


# ------------------------------------------------------------------------------------ failures: one line
def test_a_missing_repository_or_file_is_one_line(hub_env: LocalHub, lm: LoadedModel) -> None:
    with pytest.raises(MissingDataError) as err:
        samples(lm, "longbench", "qasper", 4096, longbench_dataset="nobody/nothing")
    assert str(err.value) == (
        f"longbench/qasper: nobody/nothing: data.zip: no such repository on {hub_env.url} (check the name; a "
        "private one needs HF_TOKEN)"
    )
    with pytest.raises(
        MissingDataError, match="^leval/tpo: zai-org/LongBench: LEval/Exam/tpo.jsonl: .*no such file"
    ):
        samples(lm, "leval", "tpo", 4096, leval_dataset="zai-org/LongBench")  # another layout: no such file


def test_a_gated_dataset_names_the_license_page_and_the_token(
    hub_env: LocalHub, lm: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub_env.add_repo("gated/leval-copy", hub_env.files("L4NLP/LEval"), gated=True)
    with pytest.raises(MissingDataError) as err:
        samples(lm, "leval", "tpo", 4096, leval_dataset="gated/leval-copy")
    page = f"{hub_env.url}/datasets/gated/leval-copy"
    assert str(err.value).endswith(f"the repository is gated; accept the license at {page} and set HF_TOKEN")
    monkeypatch.setenv("HF_TOKEN", hub_env.token)
    assert samples(lm, "leval", "tpo", 4096, leval_dataset="gated/leval-copy")


def test_a_gated_model_names_the_license_page_and_the_token(hub_env: LocalHub) -> None:
    from lampe_eval.models import load_model

    with pytest.raises(MissingDataError) as err:
        load_model("gated/llama-gated", device="cpu")
    line = str(err.value)
    assert "\n" not in line and line.endswith(
        f"accept the license at {hub_env.url}/gated/llama-gated and set HF_TOKEN"
    )


def test_one_remote_code_rule_for_the_first_and_every_later_run(hub_env: LocalHub) -> None:
    """A checkpoint whose auto_map names code for a model_type transformers implements (Phi-3) loads with
    transformers' own classes the first time and every time after; one whose model_type it lacks is refused
    in one line."""
    from lampe_eval.errors import UnsupportedModelError
    from lampe_eval.models import load_model

    for _ in range(2):  # the second run reads the cached config with its auto_map
        lm = load_model("phi3/tiny-phi3", device="cpu")
        assert type(lm.model).__module__.startswith("transformers.models.phi3")
    with pytest.raises(UnsupportedModelError, match="asks to run its own code.*model_type"):
        load_model("remote/custom-arch", device="cpu")


# ------------------------------------------------------------------------ the runner: data before models
def counting_loader(loads: list[str], tokenizer: Any) -> Any:
    """The run's ``load`` hook: a tiny random Llama with SmolLM2's tokenizer, each load counted."""
    from lampe_eval.testing import tiny_llama

    def load(name: str) -> LoadedModel:
        loads.append(name)
        return LoadedModel(name, tiny_llama(window=2048, vocab=len(tokenizer)), tokenizer, 2048, False)

    return load


def test_a_data_error_costs_no_model_load_and_the_other_jobs_run(
    hub_env: LocalHub, tmp_path: Path, smollm2_tokenizer: Any
) -> None:
    nowhere = {"longbench_dataset": "nobody/nothing"}
    bad = Job("tiny", "rope", "longbench", "qasper", 512, limit=1, options=nowhere)
    good = Job("tiny", "rope", "longbench", "passage_count", 512, limit=1, options={"fixture": True})
    other = Job("tiny2", "rope", "longbench", "trec", 512, limit=1, options=nowhere)
    loads: list[str] = []
    loader = counting_loader(loads, smollm2_tokenizer)
    result = run(Experiment.from_jobs([bad, good, other], tmp_path / "R", load=loader))
    assert loads == ["tiny"]  # only the job whose data is there loaded a model
    errors = [f["error"] for f in result.failures]
    assert len(errors) == 2 and all("nobody/nothing: data.zip: no such repository" in e for e in errors)
    assert result.computed == 1


def test_a_dataset_update_recomputes_and_the_same_revision_resumes(
    hub_env: LocalHub, tmp_path: Path, smollm2_tokenizer: Any
) -> None:
    hub_env.add_repo("mirror/longbench-updated", dict(hub_env.files("zai-org/LongBench")))
    mirror = {"longbench_dataset": "mirror/longbench-updated"}
    job = Job("tiny", "rope", "longbench", "passage_count", 512, limit=1, options=mirror)
    loads: list[str] = []

    def once() -> Any:
        loader = counting_loader(loads, smollm2_tokenizer)
        return run(Experiment.from_jobs([job], tmp_path / "R", load=loader))

    assert once().computed == 1
    assert once().computed == 0  # same commit: resumed
    record = json.loads((tmp_path / "R" / "records.jsonl").read_text().splitlines()[0])
    first = record["meta"]["data_source"]
    assert first.startswith(f"hub:mirror/longbench-updated@{hub_env.head('mirror/longbench-updated')[:12]}")
    hub_env.update_repo(
        "mirror/longbench-updated", {"README.md": b"---\n---\nupdated card\n"}
    )  # a new commit
    assert once().computed == 1  # the data's revision is part of what a stored record was computed on
    last = json.loads((tmp_path / "R" / "records.jsonl").read_text().splitlines()[-1])["meta"]["data_source"]
    assert last != first and hub_env.head("mirror/longbench-updated")[:12] in last


# ------------------------------------------------------------------------------ data check / data fetch
def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out, out.err


EXPERIMENT = """
name: hub-grid
grid:
  - models: [tiny/llama-random]
    methods: [rope]
    benchmarks: {longbench: [passage_count], pg19: [pg19]}
    lengths: [512]
"""


def test_data_check_then_fetch_then_an_offline_run(
    hub_env: LocalHub, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "grid.yaml").write_text(EXPERIMENT)
    grid = ("--experiment", str(tmp_path / "grid.yaml"))
    code, out, err = cli(capsys, "data", "check", *grid)
    assert code == 0, err
    assert (
        "longbench [passage_count]  hub:zai-org/LongBench: data.zip" in out
        and "on the hub, not cached" in out
    )
    assert "pg19 [pg19]  hub:emozilla/pg19-test: config default, split test" in out
    assert "model  tiny/llama-random" in out and hub_env.downloads() == []  # checking downloads nothing
    code, out, err = cli(capsys, "data", "fetch", *grid)
    assert code == 0, err
    assert f"in the hub cache, commit {hub_env.head('zai-org/LongBench')[:12]}" in out
    fetched = {(r, p) for r, p in hub_env.downloads()}
    assert ("zai-org/LongBench", "data.zip") in fetched and (
        "tiny/llama-random",
        "model.safetensors",
    ) in fetched
    code, out, err = cli(capsys, "data", "check", *grid)
    assert out.count("in the hub cache") == 3, out
    set_offline(monkeypatch)
    hub_env.clear_log()
    code, out, err = cli(capsys, "run", *grid, "--limit", "1", "--out", str(tmp_path / "R"), "--no-progress")
    assert code == 0, err
    assert hub_env.requests == []  # the offline run asked the hub nothing
    records = [json.loads(line) for line in (tmp_path / "R" / "records.jsonl").read_text().splitlines()]
    assert {r["benchmark"] for r in records} == {"longbench", "pg19"}
    assert all(r["meta"]["data_source"].startswith("hub:") for r in records)


def test_data_fetch_into_a_data_dir_then_an_offline_run_reads_it(
    hub_env: LocalHub, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = ("--data-dir", str(tmp_path / "D"))
    for bench, task in (("leval", "tpo"), ("infinitebench", "longbook_qa_eng"), ("pg19", "pg19")):
        code, out, err = cli(capsys, "data", "fetch", "--bench", bench, "--task", task, "--len", "2k", *data)
        assert code == 0, err
    assert (tmp_path / "D" / "leval" / "LEval" / "Exam" / "tpo.jsonl").is_file()
    assert (tmp_path / "D" / "infinitebench" / "longbook_qa_eng.jsonl").is_file()
    assert (tmp_path / "D" / "pg19" / "data" / "test-00000-of-00001.parquet").is_file()
    set_offline(monkeypatch)
    for bench, task in (("leval", "tpo"), ("infinitebench", "longbook_qa_eng"), ("pg19", "pg19")):
        code, out, err = cli(capsys, "data", "check", "--bench", bench, "--task", task, "--len", "2k", *data)
        assert code == 0 and "local file" in out and str(tmp_path / "D" / bench) in out, (out, err)


def test_data_check_says_what_is_missing_one_line_per_benchmark(
    hub_env: LocalHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(
        capsys, "data", "check", "--bench", "leval", "--len", "4k", "--opt", "leval_dataset=nobody/nothing"
    )
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith("missing: leval [coursera, gsm100, quality, tpo, sci_fi]: nobody/nothing:")
    assert lines[0].endswith("(and 4 more of its sources)")


def test_run_dry_run_includes_the_data_check(
    hub_env: LocalHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = (
        "run",
        "--bench",
        "longbench",
        "--task",
        "qasper",
        "--len",
        "2k",
        "--dry-run",
        "--out",
        str(tmp_path / "R"),
    )
    code, out, err = cli(capsys, *args)
    assert code == 0 and "hub:zai-org/LongBench: data.zip" in out, err
    code, out, err = cli(capsys, *args, "--opt", "longbench_dataset=nobody/nothing")
    assert code == 1 and "missing: longbench [qasper]: nobody/nothing: data.zip: no such repository" in err


def test_offline_and_not_cached_names_the_fetch(
    monkeypatch: pytest.MonkeyPatch, lm: LoadedModel, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(MissingDataError) as err:
        samples(lm, "longbench", "qasper", 4096)
    assert "not in the hub cache and HF_HUB_OFFLINE is set; run `lampe-eval data fetch`" in str(err.value)
    assert hub.offline()


def test_a_broken_connection_reads_the_cached_copy_of_the_same_source(
    hub_env: LocalHub, lm: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub looked reachable but stops answering: the files already in the cache are those of the same
    repository (no other data); a repository that answers "no" is never replaced by a cached copy."""
    import httpx

    (first, *_) = samples(lm, "leval", "tpo", 4096)

    def broken(*args: Any, **kwargs: Any) -> str:
        raise httpx.ConnectError("connection reset")

    monkeypatch.setattr(hub, "remote_commit", broken)
    (again, *_) = samples(lm, "leval", "tpo", 4096)
    assert again.meta["data_source"] == first.meta["data_source"]
    with pytest.raises(MissingDataError, match="ConnectError: connection reset"):
        samples(lm, "leval", "coursera", 4096)  # not cached: the one line
