# Full-width letters and Chinese punctuation in strings are the test data here.
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.mentions import (
    Entity,
    EntityMentions,
    detect_mentions,
    find_mentions,
    normalize_text,
)

ACME = Entity("Acme", ("ACME", "艾克米", "Acme Cloud"), ("acme.com",))
GLOBEX = Entity("Globex", ("环球", "Globex Corp"), ("globex.com",))
INITECH = Entity("Initech", ("英特泰克",))


def by_name(results: list[EntityMentions], name: str) -> EntityMentions:
    (found,) = [r for r in results if r.name == name]
    return found


def surfaces(text: str, item: EntityMentions) -> list[str]:
    return [text[a:b] for a, b in item.spans]


def test_mixed_chinese_english_answer_with_aliases() -> None:
    text = (
        "在国内云服务里，我更推荐艾克米（ACME），其次是环球。"
        "If you need global coverage, Globex Corp is fine, but Acme Cloud is cheaper. "
        "总结：艾克米 > Globex。"
    )
    results = detect_mentions(text, [ACME, GLOBEX, INITECH])
    acme, globex, initech = results
    assert [r.name for r in results] == ["Acme", "Globex", "Initech"]

    assert acme.mentioned and acme.count == 4
    assert surfaces(text, acme) == ["艾克米", "ACME", "Acme Cloud", "艾克米"]
    assert globex.mentioned and globex.count == 3
    assert surfaces(text, globex) == ["环球", "Globex Corp", "Globex"]
    assert not initech.mentioned
    assert initech.count == 0
    assert initech.first_position is None
    assert initech.rank is None
    assert initech.spans == []

    assert acme.rank == 1
    assert globex.rank == 2
    assert acme.first_position == text.index("艾克米")
    assert globex.first_position == text.index("环球")


def test_first_position_is_an_offset_into_the_original_text() -> None:
    # Characters before the mention change length under NFKC/casefold ("ß" -> "ss",
    # "ﬁ" -> "fi", "㈱" -> "(株)", "e"+U+0301 cluster), so normalised offsets would differ.
    text = "Straße ﬁne ㈱ cafe\u0301 — ＡＣＭＥ rocks, Acme too"
    (acme,) = detect_mentions(text, [ACME])
    assert acme.count == 2
    pos = acme.first_position
    assert pos is not None
    assert text[pos : pos + len("ＡＣＭＥ")] == "ＡＣＭＥ"
    start, end = acme.spans[0]
    assert (start, end) == (pos, pos + 4)
    assert text[start:end] == "ＡＣＭＥ"
    assert surfaces(text, acme) == ["ＡＣＭＥ", "Acme"]


def test_full_width_variants_match() -> None:
    text = "ＡＣＭＥ和Ａｃｍｅ还有ａｃｍｅ都是同一家公司"
    (acme,) = detect_mentions(text, [ACME])
    assert acme.count == 3
    assert surfaces(text, acme) == ["ＡＣＭＥ", "Ａｃｍｅ", "ａｃｍｅ"]


def test_full_width_alias_matches_half_width_text() -> None:
    (item,) = detect_mentions("we use acme daily", [Entity("Ａｃｍｅ")])
    assert item.count == 1
    assert item.spans == [(7, 11)]


def test_case_insensitive_casefold() -> None:
    text = "STRASSE, strasse and Straße"
    (item,) = detect_mentions(text, [Entity("Straße")])
    assert item.count == 3


def test_near_misses_inside_latin_words_do_not_match() -> None:
    text = "Acmeville is a town. AcmeCorp is unrelated. pacme is a typo. acme2 and 2acme too."
    (acme,) = detect_mentions(text, [ACME])
    assert not acme.mentioned
    assert acme.count == 0


def test_full_width_near_miss_does_not_match() -> None:
    (acme,) = detect_mentions("ＡｃｍｅＣｏｒｐ and Ａｃｍｅｖｉｌｌｅ", [ACME])
    assert acme.count == 0


def test_accented_latin_letter_is_part_of_the_word() -> None:
    # "é" is a Latin letter: "Acmé" is a different word; "Acme" + combining accent too.
    (acme,) = detect_mentions("Acmé and Acme\u0301 differ", [ACME])
    assert acme.count == 0


def test_latin_boundaries_punctuation_and_cjk() -> None:
    text = 'Acme\'s plan (Acme) costs less. 选Acme。用Acme做网站，"Acme"、Acme-based, Acme_x'
    (acme,) = detect_mentions(text, [ACME])
    assert acme.count == 7
    assert all(s == "Acme" for s in surfaces(text, acme))


def test_cjk_alias_matches_inside_cjk_text() -> None:
    text = "我喜欢艾克米的产品"
    (acme,) = detect_mentions(text, [ACME])
    assert acme.count == 1
    assert acme.first_position == 3
    assert text[3:6] == "艾克米"


def test_cjk_alias_next_to_latin_letters() -> None:
    text = "abc艾克米xyz"
    (acme,) = detect_mentions(text, [ACME])
    assert acme.spans == [(3, 6)]


def test_mixed_alias_only_latin_edge_has_a_boundary() -> None:
    ent = Entity("Acme云")
    assert detect_mentions("我用Acme云很久了", [ent])[0].count == 1
    assert detect_mentions("我用XAcme云很久了", [ent])[0].count == 0


def test_overlapping_aliases_counted_once_longest_wins() -> None:
    text = "Acme Cloud is the product; Acme is the company."
    (acme,) = detect_mentions(text, [ACME])
    assert acme.count == 2
    assert surfaces(text, acme) == ["Acme Cloud", "Acme"]


def test_duplicate_aliases_of_one_entity_count_once() -> None:
    ent = Entity("Acme", ("ACME", "acme", "Ａｃｍｅ"))
    (item,) = detect_mentions("Acme", [ent])
    assert item.count == 1


def test_whitespace_variants_in_multiword_alias() -> None:
    text = "Try Acme\u00a0Cloud, Acme\n  Cloud or Acme\u3000Cloud."
    (acme,) = detect_mentions(text, [ACME])
    assert surfaces(text, acme) == ["Acme\u00a0Cloud", "Acme\n  Cloud", "Acme\u3000Cloud"]


def test_zero_width_characters_are_ignored() -> None:
    text = "Ac\u200bme is here"
    (acme,) = detect_mentions(text, [ACME])
    assert acme.spans == [(0, 5)]


def test_longest_match_across_entities_wins() -> None:
    # "Cloud" is a competitor alias, contained in the brand alias "Acme Cloud".
    cloudco = Entity("CloudCo", ("Cloud",))
    text = "Acme Cloud beats Cloud by CloudCo."
    acme, cloud = detect_mentions(text, [ACME, cloudco])
    assert surfaces(text, acme) == ["Acme Cloud"]
    assert surfaces(text, cloud) == ["Cloud", "CloudCo"]
    assert acme.rank == 1
    assert cloud.rank == 2


def test_cjk_alias_contained_in_other_entity_alias() -> None:
    # "环球" (Globex) is inside "环球通" (a different company): the longer one wins.
    other = Entity("Huanqiutong", ("环球通",))
    text = "环球通和环球不是一家"
    globex, hqt = detect_mentions(text, [GLOBEX, other])
    assert surfaces(text, hqt) == ["环球通"]
    assert surfaces(text, globex) == ["环球"]
    assert hqt.rank == 1
    assert globex.rank == 2


def test_ambiguous_identical_span_is_flagged_and_not_attributed() -> None:
    a = Entity("Apex Labs", ("Apex",))
    b = Entity("Apex Systems", ("APEX",))
    text = "Apex is popular. Apex Labs is the lab."
    result = find_mentions(text, [a, b])
    labs, systems = result.entities
    assert result.needs_review
    assert len(result.ambiguous) == 1
    amb = result.ambiguous[0]
    assert (amb.start, amb.end, amb.text) == (0, 4, "Apex")
    assert amb.entities == ("Apex Labs", "Apex Systems")
    assert surfaces(text, labs) == ["Apex Labs"]
    assert not systems.mentioned
    assert labs.ambiguous and systems.ambiguous
    assert labs.rank == 1
    assert amb.as_dict() == {
        "start": 0,
        "end": 4,
        "text": "Apex",
        "entities": ["Apex Labs", "Apex Systems"],
    }


def test_no_ambiguity_flag_for_clean_text() -> None:
    result = find_mentions("Acme and Globex", [ACME, GLOBEX])
    assert not result.needs_review
    assert result.ambiguous == []
    assert not any(item.ambiguous for item in result.entities)
    assert result.by_name("Globex").rank == 2


def test_rank_follows_first_mention_not_entity_order() -> None:
    text = "Initech first, then 环球, and finally ACME. Initech again."
    acme, globex, initech = detect_mentions(text, [ACME, GLOBEX, INITECH])
    assert (initech.rank, globex.rank, acme.rank) == (1, 2, 3)
    assert initech.count == 2


def test_spans_are_sorted_and_do_not_overlap() -> None:
    text = "ACME Acme Cloud 艾克米艾克米 acme"
    (acme,) = detect_mentions(text, [ACME])
    assert acme.spans == sorted(acme.spans)
    for (_, end), (start, _) in zip(acme.spans, acme.spans[1:], strict=False):
        assert end <= start
    assert acme.count == len(acme.spans) == 5


def test_empty_inputs() -> None:
    assert detect_mentions("", [ACME])[0].count == 0
    assert detect_mentions("Acme", []) == []
    (blank,) = detect_mentions("anything", [Entity("  ", ("",))])
    assert blank.count == 0


def test_normalize_text_maps_back_to_original() -> None:
    norm = normalize_text("Ａß")
    assert norm.text == "ass"
    assert norm.original_span(1, 3) == (1, 2)
    assert norm.original_span(0, 1) == (0, 1)


latin_or_cjk = st.text(
    alphabet=st.sampled_from(list("aAcCeEmM ＡＣＭＥ艾克米的.ßﬁ㈱\u0301\u200b\u3000x")),
    max_size=40,
)


@settings(
    derandomize=True,
    database=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(latin_or_cjk)
def test_property_every_span_normalises_to_an_alias(text: str) -> None:
    aliases = {normalize_text(a).text for a in ACME.surface_forms()}
    (acme,) = detect_mentions(text, [ACME])
    assert acme.count == len(acme.spans)
    previous_end = 0
    for start, end in acme.spans:
        assert 0 <= previous_end <= start < end <= len(text)
        assert normalize_text(text[start:end]).text.strip(" ") in aliases
        previous_end = end
    if acme.spans:
        assert acme.first_position == acme.spans[0][0]
        assert acme.rank == 1


def test_ambiguity_flag_reaches_detect_mentions_callers() -> None:
    a = Entity("A", ("Apex",))
    b = Entity("B", ("Apex",))
    c = Entity("C", ("Zeta",))
    flags = [(m.name, m.ambiguous) for m in detect_mentions("Apex and Zeta", [a, b, c])]
    assert flags == [("A", True), ("B", True), ("C", False)]


# --- normalisation: the one-to-one fast path gives what the per-cluster loop gives ------------


def _as_tuple(text: str) -> tuple[object, ...]:
    norm = normalize_text(text)
    return (norm.text, norm.starts, norm.ends, norm.cluster_start, norm.cluster_end)


def test_normalize_text_collapses_whitespace_runs_onto_their_first_character() -> None:
    norm = normalize_text("Ａｃ \t\u3000\u00a0ME\n\n艾克米 ")
    assert norm.text == "ac me 艾克米 "
    assert norm.starts == (0, 1, 2, 6, 7, 8, 10, 11, 12, 13)
    assert norm.ends == (1, 2, 6, 7, 8, 10, 11, 12, 13, 14)
    assert norm.cluster_start == frozenset(range(10))
    assert norm.cluster_end == frozenset(range(1, 11))


def test_normalize_text_plain_and_cjk_text_map_one_to_one() -> None:
    text = "关于“CRM”，推荐 Acme！👍"
    norm = normalize_text(text)
    assert norm.text == "关于“crm”,推荐 acme!👍"
    assert norm.starts == tuple(range(len(text)))
    assert norm.ends == tuple(range(1, len(text) + 1))


def test_normalize_text_clusters_expansions_and_format_characters() -> None:
    # An accent joins its base; "ß" and "㈱" expand inside one cluster; a zero-width space
    # between two spaces vanishes and the spaces merge; a soft hyphen vanishes.
    norm = normalize_text("Acme\u0301 ß \u200b ㈱ Ac\u00adme")
    assert norm.text == "acmé ss (株) acme"
    assert norm.original_span(3, 4) == (3, 5)  # "é" covers "e" + U+0301
    assert norm.original_span(5, 7) == (6, 7)  # "ss" from "ß"
    assert norm.original_span(7, 8) == (7, 10)  # one space over " \u200b "
    assert 9 not in norm.cluster_start and 10 not in norm.cluster_end  # inside "(株)"
    assert normalize_text("\u0301a").text == "\u0301a"  # a leading mark is its own base


@settings(derandomize=True, database=None, max_examples=400)
@given(
    st.text(
        alphabet=st.sampled_from(
            list("aZ09 .,\t\n\r\x0b\x1c\x00\x7fＡｃ艾。，“\u3000\u00a0\u2028\u2029\u1680")
            + list("ßﬁ㈱İ\u0301\u0308\u200b\u00ad\ufeff\u00a8ｶﾞ①👍\ufe0f\u200d한")
        ),
        max_size=30,
    )
)
def test_property_fast_normalisation_equals_the_cluster_loop(text: str) -> None:
    from analysis.mentions import _normalize_clusters

    general = _normalize_clusters(text)
    assert _as_tuple(text) == (
        general.text,
        general.starts,
        general.ends,
        general.cluster_start,
        general.cluster_end,
    )
