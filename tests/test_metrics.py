"""Shared scorers against hand-computed values (the official LongBench / InfiniteBench definitions).

Each expected number is worked out in the comment next to it from the official rule, so a change in
behaviour shows up as a wrong number, not as a silently different implementation.
"""

from __future__ import annotations

import pytest

from lampe_eval.benchmarks import metrics as m

# --------------------------------------------------------------------------- normalisation


def test_normalize_answer_english() -> None:
    # lowercase -> strip ASCII punctuation -> drop whole-word articles -> collapse spaces
    assert m.normalize_answer("The  Cat's (big) hat!") == "cats big hat"
    assert m.normalize_answer("An apple, a day") == "apple day"
    assert m.normalize_answer("theory another") == "theory another"  # articles only as whole words
    assert m.normalize_answer("") == ""


def test_normalize_zh_answer() -> None:
    # lowercase, ASCII + CJK punctuation removed, every whitespace removed
    assert m.normalize_zh_answer("北京， 是 首都。ABC!") == "北京是首都abc"
    # the official set has the closing "》" but not the opening "《" (kept, as in LongBench)
    assert m.normalize_zh_answer("《活着》——余华") == "《活着余华"


def test_first_line() -> None:
    assert m.first_line("\n\nCity\nQuestion: next") == "City"
    assert m.first_line("  City \nmore") == "  City "  # only newlines are stripped, on the left
    assert m.first_line("") == ""


# --------------------------------------------------------------------------- F1


def test_qa_f1_english() -> None:
    # "cat sat on mat" vs "cat sat": 2 common, P = 2/4, R = 2/2 -> F1 = 2/3
    assert m.qa_f1_score("The cat sat on the mat.", "a cat sat") == pytest.approx(2 / 3)
    assert m.qa_f1_score("Paris!", "paris") == 1.0  # punctuation and case
    assert m.qa_f1_score("An apple", "the apple") == 1.0  # articles
    assert m.qa_f1_score("", "apple") == 0.0  # empty prediction
    assert m.qa_f1_score("the", "apple") == 0.0  # normalises to nothing
    # repeated tokens count as a multiset: "no no" vs "no": common 1, P = 1/2, R = 1 -> 2/3
    assert m.qa_f1_score("no no", "no") == pytest.approx(2 / 3)


def test_max_over_references() -> None:
    # vs "1200": P = 1/3, R = 1 -> 0.5; vs "1200 english news articles": common 2, P = 2/3, R = 2/4 -> 4/7
    refs = ["1,200", "1,200 English news articles"]
    assert m.max_over_references(m.qa_f1_score, "1,200 news items", refs) == pytest.approx(4 / 7)
    assert m.max_over_references(m.qa_f1_score, "anything", []) == 0.0


def test_qa_f1_chinese_jieba() -> None:
    # jieba: 我/爱/北京 vs 北京 -> P = 1/3, R = 1 -> 0.5
    assert m.jieba_cut("我爱北京") == ["我", "爱", "北京"]
    assert m.qa_f1_zh_score("我爱北京", "北京") == pytest.approx(0.5)
    # "。" is its own jieba token, normalised to "" and dropped
    assert m.qa_f1_zh_score("北京。", "北京") == 1.0
    assert m.qa_f1_zh_score("", "北京") == 0.0


def test_qa_f1_chinese_characters() -> None:
    # InfiniteBench Zh.QA: characters 北/京/大/学 vs 北/京 -> P = 1/2, R = 1 -> 2/3
    assert m.qa_f1_zh_char_score("北京大学。", "北京") == pytest.approx(2 / 3)


# --------------------------------------------------------------------------- ROUGE-L (LongBench)


def test_rouge_l_counts_distinct_words() -> None:
    # One sentence each. Distinct words: hyp {the,cat,sat,on,mat} = 5, ref {the,cat,is,on,mat} = 5.
    # LCS = the cat on the mat, as a set {the,cat,on,mat} = 4 -> P = R = 4/5, F = 2PR/(P+R+1e-8).
    p = r = 4 / 5
    assert m.rouge_l_score("the cat sat on the mat", "the cat is on the mat") == 2.0 * (p * r) / (
        p + r + 1e-8
    )
    # Google's rouge-score counts tokens: LCS 5 of 6 -> 5/6 (a different number, on purpose)
    assert m.google_rouge_score("the cat sat on the mat", "the cat is on the mat", "rougeL") == pytest.approx(
        5 / 6
    )


def test_rouge_l_sentences_split_on_dots() -> None:
    # sentences ["Cats sleep", "Dogs bark"] both ways: the union LCS covers all 4 words -> F ~ 1
    assert m.rouge_l_score("Cats sleep. Dogs bark.", "Dogs bark. Cats sleep.") == pytest.approx(1.0, abs=1e-7)
    # a whitespace-only piece is an empty sentence whose word "" counts: hyp words {yes, ""} (n = 2),
    # ref {yes} (m = 1), overlap 1 -> P = 1/2, R = 1 -> F = 2/3
    assert m.rouge_l_score("yes. ", "yes") == pytest.approx(2 / 3, abs=1e-7)


def test_rouge_l_case_and_empty() -> None:
    assert m.rouge_l_score("Paris", "paris") == 0.0  # case-sensitive, no normalisation
    assert m.rouge_l_score("", "a summary") == 0.0  # the library raises; the official code returns 0
    assert m.rouge_l_score("...", "a summary") == 0.0  # only dots: no sentence
    assert m.rouge_l_score("no no no", "no") == pytest.approx(1.0, abs=1e-7)  # distinct words


def test_rouge_l_chinese() -> None:
    # jieba words joined by spaces: [我, 爱, 北京] vs [北京] -> n = 3, m = 1, overlap 1 -> F = 0.5
    assert m.rouge_l_zh_score("我爱北京", "北京") == pytest.approx(0.5, abs=1e-7)
    assert m.rouge_l_zh_score("会议决定先发问卷。", "会议决定先发问卷。") == pytest.approx(1.0, abs=1e-7)
    assert m.rouge_l_zh_score("", "北京") == 0.0


def test_google_rouge_lsum_uses_newline_sentences() -> None:
    # rougeLsum: ref sentences "c d", "a b" each fully covered -> 1.0; plain rougeL: LCS 2 of 4 -> 0.5
    assert m.google_rouge_score("a b\nc d", "c d\na b") == pytest.approx(1.0)
    assert m.google_rouge_score("a b\nc d", "c d\na b", "rougeL") == pytest.approx(0.5)
    assert m.google_rouge_score("a b", ["x y", "a b"]) == pytest.approx(1.0)  # best reference


# --------------------------------------------------------------------------- classification etc.

TREC = ["Number", "of something", "Number of something", "City", "Individual", "Other location"]


def test_classification_score() -> None:
    assert m.classification_score("City", "City", all_classes=TREC) == 1.0
    # two classes found, gold among them -> 1/2
    assert m.classification_score("Individual or City", "City", all_classes=TREC) == 0.5
    assert m.classification_score("Other location", "City", all_classes=TREC) == 0.0
    assert m.classification_score("", "City", all_classes=TREC) == 0.0


def test_classification_drops_substrings_of_gold_with_the_official_skip() -> None:
    classes = ["Number", "Number of something", "City"]
    # "Number" is a proper substring of the gold: dropped -> only the gold remains -> 1.0
    assert m.classification_score("Number of something", "Number of something", all_classes=classes) == 1.0
    # Found: [Number, of something, Number of something]. The official loop removes "Number" while
    # iterating, so "of something" (shifted into its place) is never examined and stays -> 1/2.
    assert m.classification_score("Number of something", "Number of something", all_classes=TREC) == 0.5


def test_retrieval_scores() -> None:
    assert m.retrieval_score("Paragraph 2", "Paragraph 2") == 1.0
    assert m.retrieval_score("Paragraph 2 or Paragraph 12", "Paragraph 2") == 0.5  # numbers [2, 12]
    assert m.retrieval_score("paragraph 20", "Paragraph 2") == 0.0  # "20" != "2"
    assert m.retrieval_score("I do not know", "Paragraph 2") == 0.0  # no number
    assert m.retrieval_zh_score("答案是段落2", "段落2") == 1.0
    assert m.retrieval_zh_score("段落3，不是段落2", "段落2") == 0.5


def test_count_score() -> None:
    assert m.count_score("3", "3") == 1.0
    assert m.count_score("There are 3 unique paragraphs out of 4.", "3") == 0.5  # numbers [3, 4]
    assert m.count_score("", "3") == 0.0


def test_code_sim_picks_first_code_line() -> None:
    gold = "    return x + 1"
    # the comment line is skipped; the chosen line is not stripped -> identical -> 100
    assert m.code_sim_score("\n# add one\n    return x + 1\nfoo()", gold) == 1.0
    # "```python" skipped; "return x" vs gold: 8 matching chars of 8 + 16 -> round(100 * 16/24) = 67
    assert m.code_sim_score("```python\nreturn x\n```", gold) == 0.67
    assert m.code_sim_score("// note\n# note\n`x`", gold) == 0.0  # no code line -> "" -> 0
    assert m.code_sim_score("", "") == 1.0  # fuzz.ratio of equal strings is 100, even empty


def test_code_sim_rounding_and_backends() -> None:
    # difflib: 5 matches, 5 + 11 chars -> 62.5, Python rounds half to even -> 62
    assert m.code_sim_score("abcde", "abcdexxxxxx") == 0.62
    # difflib takes the first longest block ("a") and finds 1 match -> round(100 * 2/7) = 29;
    # Levenshtein's ratio uses the true LCS "xb" -> round(100 * 4/7) = 57
    assert m.code_sim_score("axb", "xcba") == 0.29
    assert m.code_sim_score("axb", "xcba", backend="levenshtein") == 0.57
    with pytest.raises(ValueError):
        m.code_sim_score("a", "b", backend="nope")


def test_code_sim_backends_match_fuzzywuzzy() -> None:
    import difflib

    fuzz = pytest.importorskip("fuzzywuzzy.fuzz")
    pairs = [("axb", "xcba"), ("return a + b", "    return a+b"), ("self.x = 1", "self.y = 2"), ("", "x")]
    levenshtein = fuzz.SequenceMatcher.__module__.endswith("StringMatcher")
    for a, b in pairs:
        expected = fuzz.ratio(a, b) / 100
        assert m.code_sim_score(a, b, backend="levenshtein" if levenshtein else "difflib") == expected
        fuzz_difflib = 0 if not a or not b else round(100 * difflib.SequenceMatcher(None, a, b).ratio())
        assert m.code_sim_score(a, b) == fuzz_difflib / 100
