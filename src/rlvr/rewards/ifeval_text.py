"""Text measures for instruction following: sentences, words, language. Pure Python, no models.

The official IFEval checker counts sentences with NLTK's punkt model and names languages with
``langdetect``; rlvr carries neither. The rules here reproduce their verdicts on ordinary prose
(the cases in ``tests/test_rewards_ifeval.py``), are deterministic, and read lower-case text as
well as capitalised text.
"""

from __future__ import annotations

import re
import unicodedata

# Words that end in a period without ending a sentence ("Dr. Smith", "e.g. this", "3 p.m. today").
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr inc ltd co corp vs etc eg ie cf al fig no vol approx dept est "
    "capt cpt lt gen col sgt rev hon jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)")
_TOKEN_BEFORE = re.compile(r"(\S+)$")
_WORD = re.compile(r"\w+")


def count_sentences(text: str) -> int:
    """Sentences in ``text``: runs ended by ``.``, ``!`` or ``?`` before a space or the end.

    A period does not end a sentence after an abbreviation ("Dr.", "e.g.", "etc." when a
    lower-case word follows), an initial ("J. Smith"), inside a number ("3.14") or a web address
    ("example.com"); an ellipsis counts once. An unterminated last sentence counts.
    """
    count = 0
    start = 0
    for end in _SENTENCE_END.finditer(text):
        if end.group().startswith(".") and not end.group().startswith("..") and _is_abbreviation(text, end):
            continue
        if text[start : end.start()].strip():
            count += 1
        start = end.end()
    return count + (1 if text[start:].strip() else 0)


def _is_abbreviation(text: str, end: re.Match[str]) -> bool:
    token = _TOKEN_BEFORE.search(text, 0, end.start())
    if token is None:
        return False
    word = token.group(1).lstrip("\"'(“‘[").rstrip(".")
    bare = word.replace(".", "").lower()
    following = text[end.end() :].lstrip()[:1]
    if len(bare) == 1 and bare.isalpha():
        return True  # an initial: "J. Smith", "a. first item"
    if "." in word and all(len(part) == 1 for part in word.split(".") if part):
        # "U.S." or "e.g.": an acronym ends the sentence only before a capitalised word
        return not (following.isupper() and bare in ("us", "uk", "eu", "un"))
    if bare in ("etc",):
        return bool(following) and following.islower()
    return bare in _ABBREVIATIONS


def count_words(text: str) -> int:
    """Runs of word characters, as IFEval counts them ("don't" is two words)."""
    return len(_WORD.findall(text))


# -- language identification -----------------------------------------------------------------------

# Unicode letters name their script: the first word of unicodedata.name ("LATIN SMALL LETTER A").
_SCRIPT_LANGUAGE = {
    "BENGALI": "bn",
    "GURMUKHI": "pa",
    "GUJARATI": "gu",
    "TAMIL": "ta",
    "TELUGU": "te",
    "KANNADA": "kn",
    "MALAYALAM": "ml",
    "THAI": "th",
    "HEBREW": "he",
    "HANGUL": "ko",
    "HIRAGANA": "ja",
    "KATAKANA": "ja",
    "CJK": "zh",
}

# Frequent short words per language, for scripts several languages share.
_STOPWORDS = {
    "en": "the and of to is in that it for was on are with as be this have not you they we he she",
    "es": "el la de que y en los se del las por un una para con no es su al lo como pero muy",
    "pt": "o a de que e do da em um para com não uma os no se na por mais as dos é são",
    "fr": "le la de et les des est un une du en que qui dans pour pas sur au ne avec il elle",
    "de": "der die und das ist nicht ein eine zu den von mit sich des auf für im dem ich sie",
    "it": "il di che e la per un una non sono del della le in con gli si da è anche",
    "pl": "i w na nie się z do to że jest jak o co ale po tak są od przez",
    "sw": "na ya wa kwa ni za katika la kuwa hii cha si vya watu pia au lakini",
    "fi": "ja on ei se että oli hän ovat mutta kun myös tai niin joka ole mitä",
    "vi": "và của là có không những được trong một cho với người này các đã",
    "ru": "и в не на что я с он как это по но из все она так его",
    "bg": "и на е да се за от не с по както това ще са които във",
    "uk": "і в на не що з та як це й до але від він вона також",
    "hi": "है हैं और के की में से को का यह एक भी",
    "mr": "आहे आणि च्या हे या मध्ये ला ची चा आहेत",
    "ne": "छ र को मा हो पनि भएको गर्न यो छन्",
    "ar": "في من على أن إلى هذا التي الذي عن مع",
    "fa": "و در به از که این را با است برای",
    "ur": "اور کے میں کی ہے سے کو یہ ہیں کہ",
}
_STOPWORD_SETS = {language: frozenset(words.split()) for language, words in _STOPWORDS.items()}
_SHARED_SCRIPT = {
    "LATIN": ("en", "es", "pt", "fr", "de", "it", "pl", "sw", "fi", "vi"),
    "CYRILLIC": ("ru", "bg", "uk"),
    "DEVANAGARI": ("hi", "mr", "ne"),
    "ARABIC": ("ar", "fa", "ur"),
}
_UKRAINIAN_LETTERS = frozenset("іїєґІЇЄҐ")
_PUNCTUATION = ".,;:!?\"'()[]{}«»“”‘’¿¡-—–،؛؟।॥*"


def detect_language(text: str) -> str | None:
    """The ISO 639-1 code of ``text``'s language, or ``None`` when it cannot tell.

    The dominant script decides where one language writes it (Thai, Korean, Bengali, …); where
    several share a script (Latin, Cyrillic, Devanagari, Arabic) the most frequent short words
    decide, case-insensitively, so all-lower-case English is still English.
    """
    scripts: dict[str, int] = {}
    for char in text:
        if char.isalpha():
            name = unicodedata.name(char, "")
            script = name.split(" ", 1)[0]
            scripts[script] = scripts.get(script, 0) + 1
    if not scripts:
        return None
    script = max(scripts, key=scripts.__getitem__)
    if script == "CJK" and (scripts.get("HIRAGANA") or scripts.get("KATAKANA")):
        return "ja"
    if script in _SCRIPT_LANGUAGE:
        return _SCRIPT_LANGUAGE[script]
    candidates = _SHARED_SCRIPT.get(script)
    if candidates is None:
        return None
    if script == "CYRILLIC" and any(char in _UKRAINIAN_LETTERS for char in text):
        return "uk"
    # Split on spaces, not \w: Indic vowel signs are not word characters to the regex engine.
    words = [word.strip(_PUNCTUATION) for word in text.casefold().split()]
    scores = {lang: sum(word in _STOPWORD_SETS[lang] for word in words) for lang in candidates}
    best = max(scores.values())
    leaders = [lang for lang, score in scores.items() if score == best]
    return leaders[0] if best > 0 and len(leaders) == 1 else None
