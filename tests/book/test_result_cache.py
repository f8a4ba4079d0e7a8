"""lneps.book.result_cache: a result comes back only for the same name, parts and package code;
without a cache folder nothing is kept."""

import json

from lneps.book import result_cache as rc


def test_a_result_is_kept_and_read_back(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"ratio": 0.1 + 0.2, "inf": float("inf"), "rows": [1, 2]}

    first = rc.cached_json("t", ["a"], compute, folder=tmp_path)
    again = rc.cached_json("t", ["a"], compute, folder=tmp_path)
    assert first == again and len(calls) == 1
    (entry,) = tmp_path.iterdir()
    assert json.loads((entry / "value.json").read_text())["ratio"] == 0.1 + 0.2  # bit for bit
    rc.cached_json("t", ["b"], compute, folder=tmp_path)
    assert len(calls) == 2


def test_changed_code_is_a_new_key(monkeypatch):
    before = rc.key("zoo", "x")
    monkeypatch.setattr(rc, "code_digest", lambda: "0" * 64)
    assert rc.key("zoo", "x") != before


def test_no_folder_no_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("LNEPS_CACHE_DIR", raising=False)
    calls = []
    for _ in range(2):
        rc.cached_json("t", [], lambda: calls.append(1) or 1)
    assert len(calls) == 2 and rc.cache_dir() is None
    monkeypatch.setenv("LNEPS_CACHE_DIR", str(tmp_path))
    assert rc.cache_dir() == tmp_path


def test_a_folder_that_cannot_be_written_is_skipped(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert rc.cached_json("t", [], lambda: [1], folder=blocker / "sub") == [1]
