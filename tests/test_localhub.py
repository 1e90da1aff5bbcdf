"""The local hub (tests/localhub.py) against the real clients: huggingface_hub, datasets and transformers
must read the miniature repositories (tests/hub_repos.py) exactly as they read the real hub, errors included,
so tests of lampe-eval's hub code mean something."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import uuid
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import hub_repos
from tests.localhub import LocalHub, hub_environment, request_paths, set_offline, subprocess_env

FIXTURES = hub_repos.FIXTURES


def test_hf_hub_download_of_longbench_zip_also_through_the_renamed_id(hub_env: LocalHub) -> None:
    from huggingface_hub import hf_hub_download

    new = Path(hf_hub_download("zai-org/LongBench", "data.zip", repo_type="dataset"))
    old = Path(hf_hub_download("THUDM/LongBench", "data.zip", repo_type="dataset"))
    assert new.read_bytes() == old.read_bytes()
    with zipfile.ZipFile(old) as archive:
        assert archive.read("data/qasper.jsonl") == (FIXTURES / "longbench" / "qasper.jsonl").read_bytes()
        assert archive.read("data/qasper_e.jsonl") == (FIXTURES / "longbench" / "qasper_e.jsonl").read_bytes()
    # the old id is answered with a 307 to the new one (the client follows it); only data.zip was sent,
    # from the CDN (an LFS file), and the commit of both snapshots is the repository's
    assert ("HEAD", "/datasets/THUDM/LongBench/resolve/main/data.zip") in hub_env.requests
    assert hub_env.downloads() == [("zai-org/LongBench", "data.zip")] * 2
    assert new.parent.name == old.parent.name == hub_env.head("zai-org/LongBench")
    assert "datasets--THUDM--LongBench" in str(old)  # the cache keeps the id it was asked for


def test_api_info_paths_and_tree(hub_env: LocalHub) -> None:
    from huggingface_hub import HfApi, dataset_info, model_info
    from huggingface_hub.hf_api import RepoFile

    api = HfApi()
    info = api.dataset_info("THUDM/LongBench", files_metadata=True)
    assert info.id == "zai-org/LongBench"  # the redirect lands on the new name
    assert info.sha == hub_env.head("zai-org/LongBench")
    assert {s.rfilename for s in info.siblings or []} == {
        ".gitattributes",
        "LongBench.py",
        "README.md",
        "data.zip",
    }
    assert info.card_data is not None and "Long Context" in info.card_data.to_dict()["tags"]
    assert dataset_info("zai-org/LongBench").sha == info.sha  # the module-level HfApi too

    files = hub_env.files("zai-org/LongBench")
    paths = api.get_paths_info(
        "zai-org/LongBench", ["data.zip", "README.md", "missing.txt"], repo_type="dataset"
    )
    assert all(isinstance(p, RepoFile) for p in paths)
    sizes = {p.path: p.size for p in paths if isinstance(p, RepoFile)}
    assert sizes == {"data.zip": len(files["data.zip"]), "README.md": len(files["README.md"])}
    lfs = {p.path: p.lfs for p in paths if isinstance(p, RepoFile)}
    assert lfs["README.md"] is None and lfs["data.zip"] is not None
    assert lfs["data.zip"]["size"] == len(files["data.zip"])

    tree = list(api.list_repo_tree("L4NLP/LEval", repo_type="dataset", recursive=True))
    names = {entry.path for entry in tree}
    assert {f"LEval/Exam/{p.name}" for p in (FIXTURES / "leval").glob("*.jsonl")} <= names
    assert {"LEval", "LEval/Exam", "LEval/Generation", "LEval.py"} <= names
    top = {entry.path for entry in api.list_repo_tree("L4NLP/LEval", repo_type="dataset")}
    assert top == {".gitattributes", "LEval", "LEval.py", "README.md"}
    hub_env.tree_page_size = 2  # pagination through the Link header
    assert set(api.list_repo_files("RMT-team/babilong", repo_type="dataset")) == set(
        hub_env.files("RMT-team/babilong")
    )
    config = model_info("tiny/llama-random").config
    assert config is not None and config["model_type"] == "llama"


def test_load_dataset_of_a_script_repository_fails_as_on_the_hub(hub_env: LocalHub) -> None:
    import datasets

    with pytest.raises(RuntimeError, match="Dataset scripts are no longer supported, but found LongBench.py"):
        datasets.load_dataset("THUDM/LongBench", "qasper", split="test")
    with pytest.raises(RuntimeError, match="found LEval.py"):
        datasets.load_dataset("L4NLP/LEval", "coursera", split="test")
    assert not [d for d in hub_env.downloads() if d[1] == "data.zip"]


def test_load_dataset_reads_the_parquet_and_json_repositories(hub_env: LocalHub) -> None:
    import datasets

    squad = datasets.load_dataset("rajpurkar/squad_v2", split="validation")
    expected = hub_repos._squad_rows(hub_repos.TEST_FIXTURES / "ruler" / "squad.json")
    assert [row["question"] for row in squad] == [row["question"] for row in expected]
    assert squad[0]["answers"] == expected[0]["answers"]

    hotpot = datasets.load_dataset("hotpotqa/hotpot_qa", "distractor", split="validation")
    first = json.loads(hub_repos.HOTPOT_VALIDATION[0].read_text(encoding="utf-8"))[0]
    assert hotpot[0]["id"] == first["_id"]
    assert hotpot[0]["context"]["title"] == [c[0] for c in first["context"]]

    babilong = datasets.load_dataset("RMT-team/babilong", "1k", split="qa1")
    assert babilong.column_names == ["input", "question", "target"]
    assert (babilong[0]["question"], babilong[0]["target"]) == ("Where is Mary?", "bathroom")
    assert "Mary moved to the bathroom." in babilong[0]["input"]
    assert len(babilong[0]["input"].split()) > 500  # the facts are hidden in background text
    # only the config's files were downloaded (1k.json of each task, not the other lengths)
    sent = {path for repo, path in hub_env.downloads() if repo == "RMT-team/babilong"}
    assert sent == {"README.md"} | {f"data/{task}/1k.json" for task in hub_repos.BABILONG_TASKS}


def test_gated_model(hub_env: LocalHub, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import hf_hub_download, model_info
    from huggingface_hub.errors import GatedRepoError
    from transformers import AutoConfig

    with pytest.raises(OSError, match="You are trying to access a gated repo") as refused:
        AutoConfig.from_pretrained("gated/llama-gated")
    assert "You must have access to it and be authenticated to access it" in str(refused.value)
    with pytest.raises(GatedRepoError, match="not in the authorized list") as forbidden:
        hf_hub_download("gated/llama-gated", "config.json", token="hf_someone_else")
    assert forbidden.value.response.status_code == 403

    # the metadata of a gated repository is public (as on the hub since 2024), unless asked otherwise
    assert model_info("gated/llama-gated").gated == "auto"
    hub_env.gated_metadata = True
    with pytest.raises(GatedRepoError) as unauthenticated:
        model_info("gated/llama-gated")
    assert unauthenticated.value.response.status_code == 401

    monkeypatch.setenv("HF_TOKEN", hub_env.token)
    assert model_info("gated/llama-gated").sha == hub_env.head("gated/llama-gated")
    config = AutoConfig.from_pretrained("gated/llama-gated")
    assert config.model_type == "llama"
    assert ("gated/llama-gated", "config.json") in hub_env.downloads()


def test_missing_repository_file_and_revision(hub_env: LocalHub) -> None:
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("nobody/nothing", "README.md", repo_type="dataset")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("zai-org/LongBench", "data/qasper.jsonl", repo_type="dataset")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("zai-org/LongBench", "README.md", repo_type="dataset", revision="v9")
    with pytest.raises(RevisionNotFoundError):
        HfApi().dataset_info("zai-org/LongBench", revision="0" * 40)
    short = hub_env.head("zai-org/LongBench")[:7]
    readme = Path(hf_hub_download("zai-org/LongBench", "README.md", repo_type="dataset", revision=short))
    assert readme.read_bytes() == hub_env.files("zai-org/LongBench")["README.md"]


def test_offline_reads_the_cache_without_a_request(
    hub_env: LocalHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    online = hf_hub_download("facebook/babi_qa", "data/tasks_1-20_v1-2.tar.gz", repo_type="dataset")
    with tarfile.open(online) as archive:
        member = archive.extractfile("tasks_1-20_v1-2/en-10k/qa1_single-supporting-fact_train.txt")
        assert member is not None
        assert member.read() == (FIXTURES / "babilong" / "qa1_single-supporting-fact_train.txt").read_bytes()
    seen = len(hub_env.requests)
    set_offline(monkeypatch)
    assert hf_hub_download("facebook/babi_qa", "data/tasks_1-20_v1-2.tar.gz", repo_type="dataset") == online
    with pytest.raises(LocalEntryNotFoundError):
        hf_hub_download("facebook/babi_qa", "README.md", repo_type="dataset")
    assert len(hub_env.requests) == seen


def test_model_repositories_load_with_transformers(
    hub_env: LocalHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    model, loading = AutoModelForCausalLM.from_pretrained("tiny/llama-random", output_loading_info=True)
    assert (
        not loading["missing_keys"] and not loading["unexpected_keys"]
    )  # the hand-written checkpoint is whole
    tokenizer = AutoTokenizer.from_pretrained("tiny/llama-random")
    ids = tokenizer("Mary moved to the bathroom.", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tokenizer))
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False).startswith(
        "<|im_start|>user"
    )
    with pytest.raises(ValueError, match="contains custom code"):
        AutoConfig.from_pretrained("remote/custom-arch", trust_remote_code=False)
    phi3, loading = AutoModelForCausalLM.from_pretrained("phi3/tiny-phi3", output_loading_info=True)
    assert type(phi3).__module__.startswith("transformers.models.phi3")  # auto_map, but transformers has phi3
    assert not loading["missing_keys"] and not loading["unexpected_keys"]
    assert "auto_map" in json.loads(hub_env.files("phi3/tiny-phi3")["config.json"])

    seen = len(hub_env.requests)
    set_offline(monkeypatch)
    AutoModelForCausalLM.from_pretrained("tiny/llama-random")
    AutoTokenizer.from_pretrained("tiny/llama-random")
    assert len(hub_env.requests) == seen


def test_snapshot_download_and_concurrent_range_reads(hub_env: LocalHub) -> None:
    from huggingface_hub import HfFileSystem, snapshot_download

    folder = Path(snapshot_download("tiny/llama-random"))
    assert {p.name for p in folder.iterdir()} == set(hub_env.files("tiny/llama-random"))

    data = hub_env.files("zai-org/LongBench")["data.zip"]
    fs = HfFileSystem()

    def piece(start: int) -> bytes:
        with fs.open("datasets/zai-org/LongBench/data.zip", "rb", block_size=1024) as handle:
            handle.seek(start)
            return bytes(handle.read(1500))

    starts = list(range(0, len(data), 1700))
    with ThreadPoolExecutor(8) as pool:
        pieces = list(pool.map(piece, starts))
    assert pieces == [data[s : s + 1500] for s in starts]
    assert any(path.startswith("/lfs/") for method, path in hub_env.requests if method == "GET")


def test_update_repo_is_a_new_commit(hub_env: LocalHub) -> None:
    from huggingface_hub import HfApi, hf_hub_download

    repo = f"test/updates-{uuid.uuid4().hex[:8]}"  # the session's hub outlives this test
    first = hub_env.add_repo(repo, {"data.json": b"[1]"})
    api = HfApi()
    assert api.dataset_info(repo).sha == first
    assert Path(hf_hub_download(repo, "data.json", repo_type="dataset")).read_bytes() == b"[1]"
    second = hub_env.update_repo(repo, {"data.json": b"[1, 2]"})
    assert second != first and api.dataset_info(repo).sha == second
    assert Path(hf_hub_download(repo, "data.json", repo_type="dataset")).read_bytes() == b"[1, 2]"
    old = hf_hub_download(repo, "data.json", repo_type="dataset", revision=first)
    assert Path(old).read_bytes() == b"[1]"  # earlier commits stay readable


def test_a_subprocess_needs_only_the_environment(local_hub: LocalHub, tmp_path: Path) -> None:
    code = (
        "from huggingface_hub import hf_hub_download; "
        "print(hf_hub_download('THUDM/LongBench-v2', 'data.json', repo_type='dataset'))"
    )
    local_hub.clear_log()
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env(local_hub, tmp_path / "hf"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    path = Path(out.stdout.strip().splitlines()[-1])
    assert path.is_relative_to(tmp_path / "hf" / "hub")
    records = json.loads(path.read_text(encoding="utf-8"))
    assert records == hub_repos._jsonl(FIXTURES / "longbench_v2" / "longbench_v2.jsonl")
    assert local_hub.downloads() == [("zai-org/LongBench-v2", "data.json")]  # through the redirect


def test_hub_environment_guards_the_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import huggingface_hub.constants as constants
    from huggingface_hub import HfApi

    with LocalHub() as hub:
        hub_environment(hub, tmp_path / "hf", monkeypatch)
        assert (hub.url, str(tmp_path / "hf" / "hub")) == (constants.ENDPOINT, constants.HF_HUB_CACHE)
        with pytest.raises(OSError):
            socket.create_connection(("huggingface.co", 443), timeout=1)
        assert hub.outside == [("huggingface.co", 443)]
        assert HfApi().whoami(token=hub.token)["name"] == "localhub-user"
        assert request_paths(hub, "GET", "whoami") == ["/api/whoami-v2"]
