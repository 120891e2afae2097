"""Singular forms of plural nouns, through the model's rule lemmatizer, without running the pipeline.

Plural nouns are the only words whose lemma mention extraction uses (segment_tagger.PLURAL_TAGS), so
they are lemmatized on their own, all in one Doc; spaCy's rule lemmatizer is redone for nouns with
its lemma index as a set (_RuleNounLemmatizer), the same forms without scanning a list per rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spacy.language import Language


def plural_lemmas(words: Sequence[str], nlp: Language) -> dict[str, str]:
    """Singular forms of plural nouns through the model's rule lemmatizer, all in one Doc."""
    if not words or "lemmatizer" not in nlp.pipe_names:
        return {}
    from spacy.pipeline import Lemmatizer
    from spacy.tokens import Doc

    lemmatizer = nlp.get_pipe("lemmatizer")
    doc = Doc(nlp.vocab, words=list(words), pos=["NOUN"] * len(words), tags=["NNS"] * len(words))
    if (isinstance(lemmatizer, Lemmatizer) and lemmatizer.mode == "rule" and not lemmatizer.overwrite
            and type(lemmatizer).rule_lemmatize is Lemmatizer.rule_lemmatize):
        rule_noun = _RuleNounLemmatizer(lemmatizer)
        return {t.text: (t.text.lower() if lemmatizer.is_base_form(t) else rule_noun(t.text)).lower()
                for t in doc}
    doc = lemmatizer(doc)
    return {t.text: t.lemma_.lower() for t in doc}


class _RuleNounLemmatizer:
    """`Lemmatizer.rule_lemmatize(token)[0]` for a NOUN without morphology, with the lemma index as
    a set (spaCy scans it as a list of ~57K words for every rule that applies)."""

    def __init__(self, lemmatizer) -> None:
        tables = lemmatizer.lookups
        self.index = set(tables.get_table("lemma_index", {}).get("noun", []))
        self.exceptions = tables.get_table("lemma_exc", {}).get("noun", {})
        self.rules = tables.get_table("lemma_rules", {}).get("noun", [])
        self.any_table = bool(self.index or self.exceptions or self.rules)

    def __call__(self, orig: str) -> str:
        string = orig.lower()
        if not self.any_table:
            return string
        forms: list[str] = []
        oov_forms = []
        for old, new in self.rules:
            if string.endswith(old):
                form = string[: len(string) - len(old)] + new
                if not form:
                    pass
                elif form in self.index or not form.isalpha():
                    if form in self.index:
                        forms.insert(0, form)
                    else:
                        forms.append(form)
                else:
                    oov_forms.append(form)
        forms = list(dict.fromkeys(forms))
        for form in self.exceptions.get(string, []):
            if form not in forms:
                forms.insert(0, form)
        if not forms:
            forms.extend(oov_forms)
        if not forms:
            forms.append(orig)
        return forms[0]
