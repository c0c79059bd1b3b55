"""codegen/epilogue.py's EpilogueForms: which epilogues of a package share one lambda type. Each lambda type
instantiates the prelude's product it is passed to anew, so a network's dozens of relu6 epilogues were
dozens of copies of ks::conv (MobileNetV2: 449 s to compile, 45 s shared); an epilogue of its own keeps
its lambda. The values through shared forms are checked by
tests/test_conv.py (its packages have dozens of epilogues) against torch."""
from __future__ import annotations

from ksbuild.codegen.epilogue import SITE_MARK, EpilogueForms


def _function(forms: EpilogueForms, texts: list[str], lifted: list[str] | None = None) -> list[str]:
    """A function body with one two-line lambda per text, marked as sites of those forms (with the constants
    in place; `lifted`: as arguments)."""
    body = ["    int64_t n = 3;"]
    for i, text in enumerate(texts):
        mark = forms.site(f"epilogue{i}", ((text, f"p{i}"), ((lifted or texts)[i], f"p{i}, c{i}")), 2)
        body += [f"    const auto epilogue{i} = [&](int64_t j, float v) {{{mark}", "    };"]
    return body


def test_forms_used_once_keep_their_own_lambdas():
    forms = EpilogueForms()
    body = _function(forms, ["A", "B", "C"])
    out = forms.resolve(body)
    assert out == [line.partition(f"  {SITE_MARK}")[0] for line in body] and not forms.declarations()


def test_epilogues_of_one_form_share_it_and_a_form_used_once_stays_a_lambda():
    forms = EpilogueForms()
    texts = ["static auto {name}() { A }"] * 6 + ["static auto {name}() { B }"] * 3 + ["static auto {name}() { C }"]
    out = forms.resolve(_function(forms, texts))
    assert out[1] == "    const auto epilogue0 = epilogue_form1(p0);"
    assert "    const auto epilogue6 = epilogue_form2(p6);" in out
    assert "    const auto epilogue9 = [&](int64_t j, float v) {" in out  # C: once
    assert forms.declarations() == ["static auto epilogue_form1() { A }", "", "static auto epilogue_form2() { B }"]
    assert not any(SITE_MARK in line for line in out) and len(out) == 1 + 9 + 2


def test_many_lambda_types_make_the_constants_arguments():
    """Up to LIFT_ABOVE distinct forms the constants stay in place (each bias its own lambda type); beyond
    that they become arguments, and the layers' epilogues share one form."""
    n = EpilogueForms.LIFT_ABOVE
    for count, shared in ((n, False), (n + 1, True)):
        forms = EpilogueForms()
        out = forms.resolve(_function(forms, [f"static auto {{name}}() {{ bias{i} }}" for i in range(count)],
                                      ["static auto {name}(const float* b) { b }"] * count))
        assert forms.lifted is shared
        assert ("    const auto epilogue0 = epilogue_form1(p0, c0);" in out) is shared
        assert len(forms.declarations()) == (1 if shared else 0)
