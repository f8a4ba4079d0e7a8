"""lneps.book.training.tables: the chapter's tables, built from the stored runs (NumPy only)."""

import math

from lneps.book.training import claims, effects, tables


def test_numbers_use_a_true_minus_and_the_books_powers():
    assert tables.signed(-0.00312) == "−0.0031" and tables.signed(0.0084) == "+0.0084"
    assert tables.signed(math.inf) == "all died"
    assert (
        tables.eps_text(1e-5) == "10⁻⁵"
        and tables.eps_text(0.0) == "0"
        and tables.eps_text(None) == "none"
    )
    c = effects.paired([0.0] * 4, [0.01, 0.012, 0.008, 0.01], margin=0.002)
    lo, hi = c.ci()
    assert tables.interval(c) == f"+0.0100 [{tables.signed(lo)}, {tables.signed(hi)}]"


def test_a_markdown_table_is_a_numbered_myst_table():
    md = tables.markdown_table("A caption", "tbl-x", ["a", "b|c"], [["1", "2"]])
    assert md.startswith(
        "```{table} A caption\n:name: tbl-x\n\n| a | b\\|c |\n|---|---|\n| 1 | 2 |"
    )
    assert md.endswith("```")


def test_the_sweep_table_has_a_row_per_epsilon_and_a_column_per_family():
    header, rows = tables.sweep_table()
    assert len(header) == 1 + len(claims.SWEEP_FAMILIES) and len(rows) == 8
    assert rows[0][0] == "0" and all(c.startswith("excess ") for c in rows[0][1:])
    assert all(any(o in c for o in effects.OUTCOMES) for r in rows[1:] for c in r[1:])


def test_the_verdict_table_names_every_claim_once():
    C = {c.key: c for c in claims.all_claims()}
    header, rows = tables.verdict_table(C)
    heads = [r for r in rows if r[1] == ""]
    assert len(heads) == len(C) and all(r[0].endswith(C[k].verdict) for r, k in zip(heads, C))
    assert all(r[3] in effects.OUTCOMES for r in rows if r[1])


def test_the_other_tables_read_the_stored_data():
    assert len(tables.probe_table()[1]) == 23
    assert len(tables.floor_table()[1]) == 6
    assert [r[0] for r in tables.autocast_table()[1]][0] == "bfloat16, input float32"
    assert tables.rule_table()[1] and tables.where_table()[1]
    assert sum(int(r[3]) for r in tables.grid_table()[1]) >= 195


def test_what_the_guide_shows():
    g = tables.guide_training()
    assert len(g["cells"]) == 3 * len(tables.GUIDE_ROWS)
    assert all(g["cells"][c, 0].endswith("seeds)") for c in tables.GUIDE_COLUMNS)
    assert g["seeds"][0] >= 3 and g["rec_eps"] in (1e-12, 1e-8)
    assert g["cost_small"].is_effect and g["cost_small"].diff > 0
