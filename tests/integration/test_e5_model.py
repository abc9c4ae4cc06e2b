"""The real baked multilingual-e5-small: tokenizer behaviour and cross-lingual ranking."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from appliance.embed import OnnxEmbedder, load_spec
from appliance.errors import ModelCorrupt, ModelMissing
from appliance.models.bake import check_baked
from appliance.models.manifest import default_models_dir

pytestmark = pytest.mark.model

MODEL_ID = "intfloat/multilingual-e5-small"

EN = ["The cat sits on the mat.", "The weather is nice today.", "I love reading books.",
      "The train leaves at eight.", "Water boils at one hundred degrees.", "My brother works as a doctor.",
      "The museum is closed on Mondays.", "She bought a new car yesterday.", "Music helps me relax.",
      "The children play in the park."]
DE = ["Die Katze sitzt auf der Matte.", "Das Wetter ist heute schön.", "Ich lese gern Bücher.",
      "Der Zug fährt um acht ab.", "Wasser kocht bei hundert Grad.", "Mein Bruder arbeitet als Arzt.",
      "Das Museum ist montags geschlossen.", "Sie hat gestern ein neues Auto gekauft.",
      "Musik hilft mir zu entspannen.", "Die Kinder spielen im Park."]
RU = ["Кошка сидит на коврике.", "Сегодня хорошая погода.", "Я люблю читать книги.",
      "Поезд отправляется в восемь.", "Вода кипит при ста градусах.", "Мой брат работает врачом.",
      "Музей закрыт по понедельникам.", "Вчера она купила новую машину.",
      "Музыка помогает мне расслабиться.", "Дети играют в парке."]


@pytest.fixture(scope="module")
def e5() -> OnnxEmbedder:
    models_dir = Path(os.environ.get("MODELS_DIR") or default_models_dir())
    spec = load_spec(MODEL_ID)
    try:
        check_baked(spec, models_dir, full=False)
    except (ModelMissing, ModelCorrupt) as exc:
        pytest.fail(f"{exc}. Bake it first: `make models` (or `minirag models bake`).", pytrace=False)
    return OnnxEmbedder(spec, models_dir, threads=2)


def test_translations_rank_each_other_first(e5):
    en, de, ru = (e5.embed_passages(texts) for texts in (EN, DE, RU))
    for a, b, pair in ((en, de, "en-de"), (en, ru, "en-ru"), (de, ru, "de-ru")):
        sims = a @ b.T
        assert (sims.argmax(axis=1) == np.arange(len(EN))).all(), pair
        assert (sims.argmax(axis=0) == np.arange(len(EN))).all(), pair


def test_query_finds_passage_across_languages(e5):
    query = e5.embed_query("When does the train depart?")
    for texts in (DE, RU):
        assert int(np.argmax(e5.embed_passages(texts) @ query)) == 3


def test_tokenizer_matches_xlmr_conventions(e5):
    tok = e5._ensure_tokenizer()
    encoding = tok.encode("query: hello world")
    assert encoding.tokens == ["<s>", "\u2581que", "ry", ":", "\u2581hell", "o", "\u2581world", "</s>"]
    assert encoding.ids[0] == 0 and encoding.ids[-1] == 2
    assert [tok.token_to_id(t) for t in ("<s>", "<pad>", "</s>", "<unk>")] == [0, 1, 2, 3]
    assert tok.encode("Привет мир").tokens[1:-1] == ["\u2581При", "вет", "\u2581мир"]
    assert tok.encode("Größe über").tokens[1:-1] == ["\u2581Größe", "\u2581über"]
    assert "".join(tok.encode("東京は日本の首都です").tokens[1:-1]).lstrip("\u2581") == "東京は日本の首都です"
    assert tok.encode("a\x01b").tokens == tok.encode("ab").tokens  # control characters are deleted
    assert tok.encode("a\u200bb").tokens == tok.encode("a b").tokens  # zero-width space becomes a space
    assert e5.count_tokens("hello  \u3000 world") == e5.count_tokens("hello world")


def test_counts_and_window(e5):
    text = " ".join(["Die Größe des Hauses ist überwältigend, sagte sie."] * 200)
    assert e5.count_tokens(text) > 2000 > 512
    assert e5.window == 512 - 2 - 2  # <s> </s>, "passage:" is two tokens
    assert e5.dim == 384 and e5.embed_query("x").shape == (384,)
