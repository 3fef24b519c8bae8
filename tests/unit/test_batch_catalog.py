"""The Glue name of a catalog table: one per (tenant, table), so tenants sharing the database
never meet in one table."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from sluice.batch.catalog import glue_table_name

# `check_name`'s and `CatalogTarget`'s names, and short ones of few letters, where two meet most
tenants = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,62}", fullmatch=True) | st.from_regex(r"[ab][ab._-]{0,6}", fullmatch=True)
tables = st.from_regex(r"[a-z0-9_]{1,128}", fullmatch=True) | st.from_regex(r"[ab_]{1,6}", fullmatch=True)


@given(tenants, tables, tenants, tables)
def test_two_tenants_tables_never_share_a_glue_name(tenant: str, table: str, other: str, other_table: str) -> None:
    if (tenant, table) != (other, other_table):
        assert glue_table_name(tenant, table) != glue_table_name(other, other_table)


@given(tenants, tables)
def test_a_glue_name_is_one_glue_takes(tenant: str, table: str) -> None:
    assert re.fullmatch(r"[a-z0-9_]{1,255}", glue_table_name(tenant, table))


def test_names_that_met_before_are_apart_and_plain_tenants_keep_theirs() -> None:
    assert glue_table_name("big_co", "scores") != glue_table_name("big-co", "scores") != glue_table_name("big.co", "scores")
    assert glue_table_name("acme", "x__y") != glue_table_name("acme__x", "y")
    assert glue_table_name("acme", "churn_scores") == "acme__churn_scores"
    assert len(glue_table_name("a" + "-" * 62, "t" * 128)) == 255
