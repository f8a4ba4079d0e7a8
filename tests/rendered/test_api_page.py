"""The API reference page (book/api.md) is generated from the docstrings of what
`pip install .` gives, and the index lists it."""

from rendered import HTML, built_article, rendered_text

DOCUMENTED = ["lneps.layer_norm", "lneps.rms_norm", "lneps.rms_norm_default_eps", "lneps.group_norm",
              "lneps.batch_norm", "lneps.layer_norm_backward", "lneps.rms_norm_backward",
              "lneps.layer_norm_eps_derivative", "lneps.testing.compare", "lneps.testing.assert_close",
              "lneps.testing.families", "lneps.testing.two_pass_bound", "lneps.testing.Report",
              "lneps.testing.Family", "lneps.testing.forward_bound", "lneps.testing.scale_bias",
              "lneps.testing.ScaleBias", "lneps.testing.ScaleTest", "lneps.testing.default_tolerance",
              "lneps.testing.backward_bound", "lneps.testing.backward_scale",
              "lneps.testing.strategies.layer_norm_inputs", "lneps.testing.strategies.rms_norm_inputs"]
# everything lneps.testing exports is on the page
import lneps.testing  # noqa: E402

DOCUMENTED += [f"lneps.testing.{n}" for n in lneps.testing.__all__
               if callable(getattr(lneps.testing, n)) and f"lneps.testing.{n}" not in DOCUMENTED]


def test_every_public_function_has_its_entry_and_docstring(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    main = built_article("book/api.html")
    ids = {node.get("id") for node in main.select("dt[id]")}
    assert set(DOCUMENTED) <= ids, set(DOCUMENTED) - ids
    text = rendered_text(main)
    # the docstrings themselves, not just the names: the conventions a kernel engineer needs
    assert "ties to even" in text and "max_ulp" in text and "scaled" in text


def test_the_general_index_is_not_empty(built_book):
    index = (HTML / "genindex.html").read_text(encoding="utf-8")
    assert "assert_close() (in module lneps.testing)" in index
    assert "layer_norm() (in module lneps)" in index
