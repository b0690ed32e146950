"""License filtering: metadata licenses, SPDX lines, license headers, and the allow-list."""

from __future__ import annotations

import pytest

import tokenport as tp
from tokenport.corpus import Document
from tokenport.corpus.steps.licenses import LicenseFilter, detect_licenses

MIT_HEADER = """# Copyright (c) 2020 Someone
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
"""
GPL_HEADER = """/*
 * This program is free software: you can redistribute it and/or modify
 * it under the terms of the GNU General Public License as published by
 * the Free Software Foundation, either version 3 of the License.
 */"""
BSD3 = """// Redistribution and use in source and binary forms, with or without modification,
// are permitted provided that ... Neither the name of the copyright holder nor the names"""


@pytest.mark.parametrize(
    "text, licenses",
    [
        (MIT_HEADER + "x = 1\n", ["mit"]),
        (GPL_HEADER, ["gpl"]),
        (BSD3, ["bsd-3-clause"]),
        ("# SPDX-License-Identifier: Apache-2.0\nimport os\n", ["apache-2.0"]),
        ("// SPDX-License-Identifier: (MIT OR GPL-2.0-only)\n", ["mit", "gpl-2.0-only"]),
        ('# Licensed under the Apache License, Version 2.0 (the "License");\n', ["apache-2.0"]),
        ("def add(a, b):\n    return a + b\n", []),
        ("x = 1\n" * 2000 + MIT_HEADER, []),  # beyond the scanned head
    ],
)
def test_detection(text, licenses):
    assert detect_licenses(text) == licenses


def test_the_step_keeps_allowed_and_unknown_and_prefers_metadata():
    step = LicenseFilter()
    docs = [
        Document(MIT_HEADER, "mit-header"),
        Document(GPL_HEADER, "gpl-header"),
        Document("print(1)", "unknown"),
        Document(GPL_HEADER, "meta-mit", {"license": "MIT"}),  # the metadata wins over the text
        Document("x", "dual", {"license": ["GPL-3.0", "Apache-2.0"]}),
        Document("x", "meta-gpl", {"license": ["GPL-3.0"]}),
        Document("// SPDX-License-Identifier: (MIT OR GPL-2.0-only)", "spdx-dual"),
    ]
    kept = list(step(docs))
    assert [d.id for d in kept] == ["mit-header", "unknown", "meta-mit", "dual", "spdx-dual"]
    assert [d.metadata.get("license") for d in kept] == ["mit", None, "mit", "apache-2.0", "mit"]
    assert step.counts() == {"removed:disallowed_license": 2, "kept:apache-2.0": 1, "kept:mit": 3, "kept:unknown": 1}
    strict = LicenseFilter(keep_unknown=False)
    assert [d.id for d in strict([Document("print(1)", "u")])] == [] and strict.counts() == {
        "removed:unknown_license": 1
    }
    with pytest.raises(tp.ConfigError, match="allowed"):
        LicenseFilter(allowed="mit")
