"""Text that no UTF-8 file or table can hold: surrogates, which Python keeps in a str while reading.

Readers decode with 'surrogateescape' so that a record with bad bytes, not the whole file, is
quarantined; a JSON "\\ud800" escape also decodes to a surrogate. Both are found here, once.
"""

import re

UNDECODABLE = re.compile("[\udc80-\udcff]")
"""Bytes that were not UTF-8, as the 'surrogateescape' error handler keeps them."""

LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""Any surrogate (UNDECODABLE's range included): a JSON "\\ud800" escape decodes to one."""
