"""The quality filters choose their reading once, when built, and refuse settings they cannot use."""

from __future__ import annotations

import pytest

from tokenport.corpus.steps.quality import C4Quality, FineWebQuality, GopherQuality, GopherRepetition
from tokenport.errors import ConfigError


def test_a_setting_that_cannot_be_turned_off_refuses_none():
    with pytest.raises(ConfigError, match="short_line_length=None is invalid"):
        FineWebQuality(short_line_length=None)  # type: ignore[arg-type]  # it used to fail later, on a page


@pytest.mark.parametrize("step", [GopherQuality, GopherRepetition, C4Quality, FineWebQuality])
def test_an_unknown_reading_is_refused_when_the_filter_is_built(step):
    with pytest.raises(ConfigError, match="compat='spacy' is not a mode"):
        step(compat="spacy")
