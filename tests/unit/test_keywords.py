"""The shared keyword analyser: inflections meet, identifiers survive, both sides agree."""
from appliance.search.keywords import analyze, keywords_field, query_terms


def _matches(query: str, text: str) -> bool:
    return bool(set(query_terms(query).split()) & set(keywords_field(None, text).split()))


def test_russian_inflections_meet() -> None:
    assert _matches("кошка", "Кошки спали на диване")
    assert _matches("договоров", "Условия договора поставки")
    assert _matches("ёлка", "Под елкой лежали подарки")


def test_german_inflections_meet() -> None:
    assert _matches("Katze", "Die Katzen schlafen")
    assert _matches("Häuser", "Das Haus am See")


def test_english_inflections_meet() -> None:
    assert _matches("running", "She runs every day")


def test_identifiers_are_kept_whole_and_split() -> None:
    terms = analyze("See ERR_ZORBLATT_7741 for details")
    assert "err_zorblatt_7741" in terms and "zorblatt" in terms and "7741" in terms
    assert _matches("ERR_ZORBLATT_7741", "the code ERR_ZORBLATT_7741 appears")


def test_unrelated_words_do_not_meet() -> None:
    assert not _matches("кошка", "собака лает")
    assert not _matches("", "anything")


def test_title_terms_are_indexed() -> None:
    terms = keywords_field("Quarterly report", "body").split()
    assert set(analyze("quarterly")) <= set(terms) and set(analyze("body")) <= set(terms)


def test_function_words_do_not_meet() -> None:
    assert not _matches("When must the form be sent from the office?", "the feed and the checksum")
    assert not _matches("und der die", "Die Katze und der Hund")
    assert analyze("и в на") == []
